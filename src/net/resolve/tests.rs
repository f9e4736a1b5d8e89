//! Validating resolver with a fake lookup: no network.

use std::{io, net::IpAddr, str::FromStr, sync::Arc};

use reqwest::dns::{Name, Resolve};

use super::{Lookup, LookupFuture, ValidatingResolver};
use crate::net::{NetError, NetPolicy};

/// Answers every name with a fixed list of addresses, or fails.
struct FakeLookup(io::Result<Vec<IpAddr>>);

impl Lookup for FakeLookup {
    fn lookup(&self, _host: &str) -> LookupFuture {
        let answer = match &self.0 {
            Ok(addrs) => Ok(addrs.clone()),
            Err(err) => Err(io::Error::new(err.kind(), err.to_string())),
        };
        Box::pin(async move { answer })
    }
}

fn ips(texts: &[&str]) -> Vec<IpAddr> {
    texts
        .iter()
        .map(|text| text.parse().expect("valid address"))
        .collect()
}

fn resolver(policy: NetPolicy, answer: io::Result<Vec<IpAddr>>) -> ValidatingResolver {
    ValidatingResolver::new(Arc::new(policy), Arc::new(FakeLookup(answer)))
}

#[tokio::test]
async fn one_private_address_rejects_the_whole_answer() {
    let rows: &[(&[&str], &str, &str)] = &[
        (&["93.184.215.14", "10.0.0.1"], "10.0.0.1", "private"),
        (&["10.0.0.1", "93.184.215.14"], "10.0.0.1", "private"),
        (&["2606:4700::1", "::1"], "::1", "loopback"),
        (
            &["8.8.8.8", "169.254.169.254"],
            "169.254.169.254",
            "cloud-metadata",
        ),
        (
            &["8.8.8.8", "::ffff:192.168.1.1"],
            "::ffff:192.168.1.1",
            "ipv4-mapped",
        ),
    ];
    for (answer, addr, range) in rows {
        let result = resolver(NetPolicy::default(), Ok(ips(answer)))
            .resolve_checked("example.com")
            .await;
        let expected = NetError::Blocked {
            addr: addr.parse().expect("valid"),
            range,
        };
        assert_eq!(result, Err(expected), "{answer:?}");
    }
}

#[tokio::test]
async fn public_answer_is_returned_exactly_through_reqwest_trait() {
    let answer = ips(&["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]);
    let resolver = resolver(NetPolicy::default(), Ok(answer.clone()));
    let name = Name::from_str("example.com").expect("valid name");
    let addrs: Vec<IpAddr> = resolver
        .resolve(name)
        .await
        .expect("public answer passes")
        .map(|addr| addr.ip())
        .collect();
    assert_eq!(addrs, answer);
}

#[tokio::test]
async fn reqwest_trait_carries_our_error() {
    let resolver = resolver(NetPolicy::default(), Ok(ips(&["8.8.8.8", "127.0.0.1"])));
    let name = Name::from_str("example.com").expect("valid name");
    let err = match resolver.resolve(name).await {
        Ok(_) => panic!("a loopback address in the answer must be refused"),
        Err(err) => err,
    };
    assert_eq!(
        err.downcast_ref::<NetError>(),
        Some(&NetError::Blocked {
            addr: "127.0.0.1".parse().expect("valid"),
            range: "loopback",
        })
    );
}

#[tokio::test]
async fn allow_private_lets_local_answers_through_except_metadata() {
    let policy = NetPolicy {
        allow_private: true,
        ..NetPolicy::default()
    };
    let local = ips(&["127.0.0.1", "10.0.0.1", "::1"]);
    let got = resolver(policy.clone(), Ok(local.clone()))
        .resolve_checked("internal.test")
        .await;
    assert_eq!(got, Ok(local));
    let got = resolver(policy, Ok(ips(&["10.0.0.1", "169.254.169.254"])))
        .resolve_checked("internal.test")
        .await;
    assert!(
        matches!(
            got,
            Err(NetError::Blocked {
                range: "cloud-metadata",
                ..
            })
        ),
        "{got:?}"
    );
}

#[tokio::test]
async fn allowlist_lookup_failure_and_empty_answer() {
    let policy = NetPolicy {
        allowed_hosts: vec!["api.example.com".into()],
        ..NetPolicy::default()
    };
    let public = ips(&["93.184.215.14"]);
    let allowed = resolver(policy.clone(), Ok(public.clone()));
    assert_eq!(allowed.resolve_checked("API.example.com").await, Ok(public));
    assert_eq!(
        allowed.resolve_checked("other.example.com").await,
        Err(NetError::HostNotAllowed {
            host: "other.example.com".into()
        })
    );
    let empty = resolver(NetPolicy::default(), Ok(Vec::new()));
    assert_eq!(
        empty.resolve_checked("example.com").await,
        Err(NetError::Resolve {
            host: "example.com".into(),
            reason: "no addresses".into()
        })
    );
    let failing = resolver(
        NetPolicy::default(),
        Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
    );
    assert!(matches!(
        failing.resolve_checked("nowhere.example").await,
        Err(NetError::Resolve { .. })
    ));
}
