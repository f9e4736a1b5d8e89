//! Table-driven tests of `check_url`: schemes, userinfo tricks, IPv4 spellings, allowlists.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

use super::{NetPolicy, check_url};
use crate::net::NetError;

fn http_policy() -> NetPolicy {
    NetPolicy {
        allow_http: true,
        ..NetPolicy::default()
    }
}

fn blocked(addr: IpAddr, range: &'static str) -> Result<(), NetError> {
    Err(NetError::Blocked { addr, range })
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[test]
fn url_parser_normalises_ipv4_spellings_to_the_address_we_classify() {
    let spellings = [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://0177.0.0.01/",
        "http://127.1/",
        "http://127.0.1/",
        "http://0x7F.0.0.1/",
        // IDNA maps full-width digits and ideographic full stops before the IPv4 parse.
        "http://\u{ff11}\u{ff12}\u{ff17}.0.0.1/",
        "http://127\u{3002}0\u{3002}0\u{3002}1/",
    ];
    for text in spellings {
        let url = Url::parse(text).expect("parses");
        assert_eq!(url.host_str(), Some("127.0.0.1"), "{text}");
        assert_eq!(
            check_url(&url, &http_policy()),
            blocked(LOOPBACK, "loopback"),
            "{text}"
        );
    }
    let metadata = Url::parse("http://2852039166/").expect("parses");
    assert_eq!(
        check_url(&metadata, &http_policy()),
        blocked(
            IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
            "cloud-metadata"
        )
    );
}

#[test]
fn url_checks_table() {
    let mapped: Ipv6Addr = "::ffff:127.0.0.1".parse().expect("valid");
    let rows: &[(&str, Result<(), NetError>)] = &[
        ("https://example.com/mcp", Ok(())),
        ("http://example.com/mcp", Ok(())),
        ("https://93.184.215.14/", Ok(())),
        ("http://example.com@127.0.0.1/", Err(NetError::UserInfo)),
        ("http://user:pw@example.com/", Err(NetError::UserInfo)),
        ("http://:pw@example.com/", Err(NetError::UserInfo)),
        // The fragment hides "@example.com": the real host is the loopback address.
        (
            "http://127.0.0.1#@example.com/",
            blocked(LOOPBACK, "loopback"),
        ),
        ("http://127.0.0.1:8080/", blocked(LOOPBACK, "loopback")),
        (
            "http://[::1]/",
            blocked(IpAddr::V6(Ipv6Addr::LOCALHOST), "loopback"),
        ),
        (
            "http://[::ffff:127.0.0.1]/",
            blocked(IpAddr::V6(mapped), "ipv4-mapped"),
        ),
        (
            "http://[::ffff:7f00:1]/",
            blocked(IpAddr::V6(mapped), "ipv4-mapped"),
        ),
        (
            "http://0.0.0.0/",
            blocked(IpAddr::V4(Ipv4Addr::UNSPECIFIED), "unspecified"),
        ),
        (
            "http://169.254.169.254/latest/meta-data/",
            blocked(
                IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
                "cloud-metadata",
            ),
        ),
        (
            "http://[fd00:ec2::254]/",
            blocked(
                IpAddr::V6("fd00:ec2::254".parse().expect("valid")),
                "cloud-metadata",
            ),
        ),
        (
            "file:///etc/passwd",
            Err(NetError::Scheme {
                scheme: "file".into(),
            }),
        ),
        (
            "ftp://example.com/",
            Err(NetError::Scheme {
                scheme: "ftp".into(),
            }),
        ),
        (
            "gopher://127.0.0.1:6379/_",
            Err(NetError::Scheme {
                scheme: "gopher".into(),
            }),
        ),
    ];
    for (text, expected) in rows {
        let url = Url::parse(text).expect("parses");
        assert_eq!(&check_url(&url, &http_policy()), expected, "{text}");
    }
}

#[test]
fn http_needs_allow_http() {
    let url = Url::parse("http://example.com/").expect("parses");
    assert_eq!(
        check_url(&url, &NetPolicy::default()),
        Err(NetError::Scheme {
            scheme: "http".into()
        })
    );
    let https = Url::parse("https://example.com/").expect("parses");
    assert_eq!(check_url(&https, &NetPolicy::default()), Ok(()));
}

#[test]
fn allow_private_permits_local_addresses_but_never_metadata() {
    let policy = NetPolicy {
        allow_private: true,
        ..http_policy()
    };
    for text in [
        "http://127.0.0.1/",
        "http://10.1.2.3/",
        "http://[::1]/",
        "http://localhost/",
    ] {
        let url = Url::parse(text).expect("parses");
        assert_eq!(check_url(&url, &policy), Ok(()), "{text}");
    }
    for text in [
        "http://169.254.169.254/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
    ] {
        let url = Url::parse(text).expect("parses");
        let result = check_url(&url, &policy);
        assert!(
            matches!(
                result,
                Err(NetError::Blocked {
                    range: "cloud-metadata",
                    ..
                })
            ),
            "{text}: {result:?}"
        );
    }
}

#[test]
fn allowlist_is_exact_and_case_insensitive() {
    let policy = NetPolicy {
        allowed_hosts: vec!["API.Example.com".into(), "127.0.0.1".into(), "::1".into()],
        allow_private: true,
        ..http_policy()
    };
    let rows: &[(&str, bool)] = &[
        ("https://api.example.com/", true),
        ("https://API.EXAMPLE.COM/x", true),
        ("https://api.example.com:8443/", true),
        ("http://127.0.0.1:9000/", true),
        ("http://2130706433/", true),
        ("http://[::1]/", true),
        ("http://[0:0:0:0:0:0:0:1]/", true),
        ("https://example.com/", false),
        ("https://evil-api.example.com/", false),
        ("https://api.example.com.evil.net/", false),
        ("https://sub.api.example.com/", false),
        // A fully qualified name is the same host.
        ("https://api.example.com./", true),
        ("https://API.EXAMPLE.COM./x", true),
        ("http://localhost/", false),
        ("http://127.0.0.2/", false),
    ];
    for (text, allowed) in rows {
        let url = Url::parse(text).expect("parses");
        let result = check_url(&url, &policy);
        if *allowed {
            assert_eq!(result, Ok(()), "{text}");
        } else {
            assert!(
                matches!(result, Err(NetError::HostNotAllowed { .. })),
                "{text}: {result:?}"
            );
        }
    }
}

#[test]
fn error_messages_do_not_echo_credentials_or_queries() {
    let url = Url::parse("http://admin:hunter2@example.com/?token=s3cret").expect("parses");
    let message = check_url(&url, &http_policy())
        .expect_err("userinfo is refused")
        .to_string();
    assert!(
        !message.contains("hunter2") && !message.contains("admin"),
        "{message}"
    );
    let url = Url::parse("http://127.0.0.1/?token=s3cret").expect("parses");
    let message = check_url(&url, &http_policy())
        .expect_err("loopback is refused")
        .to_string();
    assert!(!message.contains("s3cret"), "{message}");
    assert!(
        message.contains("127.0.0.1") && message.contains("loopback"),
        "{message}"
    );
}

/// `allow_loopback` opens loopback and nothing else: private, link-local, metadata and the
/// IPv4-mapped spelling of loopback stay blocked.
#[test]
fn allow_loopback_opens_loopback_alone() {
    let policy = NetPolicy {
        allow_loopback: true,
        ..NetPolicy::default()
    };
    assert_eq!(policy.check_ip(LOOPBACK), Ok(()));
    assert_eq!(policy.check_ip(IpAddr::V6(Ipv6Addr::LOCALHOST)), Ok(()));
    for ip in [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1)),
        IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
        IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
        IpAddr::V6("fd00::1".parse().expect("ipv6")),
    ] {
        assert!(policy.check_ip(ip).is_err(), "{ip}");
    }
    assert!(NetPolicy::default().check_ip(LOOPBACK).is_err());
}
