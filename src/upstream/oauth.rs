//! Servers with `auth = "oauth"`: every request carries a user's own token. A call goes over a
//! session of that user's alone, opened with their token (a new one when the token changes);
//! the server's shared session, which lists its tools and hears its notifications, is opened
//! with the token of a user who connected, and waits while nobody has.

use std::{collections::HashMap, sync::Arc};

use futures::{future::BoxFuture, stream::BoxStream};
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage},
    transport::auth::WWWAuthenticateParams,
    transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::{Error as SseError, Sse};
use zeroize::Zeroizing;

use crate::config::{SecretTemplate, ServerConfig, ServerId, TransportConfig};

/// Tokens to list a server with: some connected user's, refreshed as needed.
pub trait ListingTokens: Send + Sync {
    /// A current token of a user who connected `server`; `None` while nobody has.
    fn listing_token<'a>(
        &'a self,
        server: &'a ServerId,
    ) -> BoxFuture<'a, Option<Zeroizing<String>>>;
}

/// The gateway's [`ListingTokens`], in [`super::ConnectOptions`].
#[derive(Clone)]
pub struct ListingTokensHandle(pub Arc<dyn ListingTokens>);

impl std::fmt::Debug for ListingTokensHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListingTokens")
    }
}

/// One user's token for one call: the session it goes over is keyed by `session` (the
/// user and a digest of the token, never the token).
#[derive(Clone)]
pub struct UserToken {
    pub session: String,
    pub secret: Zeroizing<String>,
}

impl UserToken {
    /// `user`'s token for a call, its session named by the user and `digest` (of the token).
    pub fn new(tenant: &str, user: &str, digest: &str, secret: Zeroizing<String>) -> UserToken {
        UserToken {
            session: format!("{}#{digest}", UserToken::user_key_of(tenant, user)),
            secret,
        }
    }

    /// The user part of [`UserToken::session`]: the same whatever the token.
    pub fn user_key(&self) -> &str {
        self.session
            .split_once('#')
            .map_or(self.session.as_str(), |(user, _)| user)
    }

    /// The key of a user's sessions, whatever their token (no name in the clear).
    pub fn user_key_of(tenant: &str, user: &str) -> String {
        format!(
            "oauth:{}",
            crate::digest::sha256_hex(format!("{tenant}\0{user}").as_bytes())
        )
    }
}

impl std::fmt::Debug for UserToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserToken")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// `server` as connected with `token`: its headers plus `Authorization: Bearer <token>`.
/// `None` for a token that could not be a header value (or would read as a reference).
pub(super) fn with_bearer(server: &ServerConfig, token: &str) -> Option<ServerConfig> {
    let valid = !token.is_empty()
        && !token.contains("${")
        && token.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if !valid {
        return None;
    }
    let mut server = server.clone();
    if let TransportConfig::Http(http) = &mut server.transport {
        http.headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
        http.headers.push((
            "Authorization".to_owned(),
            SecretTemplate::new(format!("Bearer {token}")),
        ));
    }
    Some(server)
}

/// What a server answered a user's session with when the token was not enough: the
/// `insufficient_scope` challenge (RFC 6750 §3.1) of a 403, or a 401.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 403 `insufficient_scope`, with the scopes the server named.
    InsufficientScope { scope: Option<String> },
    /// 401: the token is not (or no longer) accepted.
    Unauthorized,
}

/// Where a session's client notes the server's refusal of its token, for the call that
/// failed to report it (rmcp's transport ends the session on it without saying why).
#[derive(Clone, Default)]
pub struct RefusalNote(Arc<std::sync::Mutex<Option<Refusal>>>);

impl RefusalNote {
    pub fn take(&self) -> Option<Refusal> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Notes what a refused response says: 401, or 403 whose `WWW-Authenticate` challenge
    /// is `insufficient_scope` (with the `scope` it names); nothing for anything else.
    /// `endpoint` is the server's URL (what a relative `resource_metadata` would resolve
    /// against).
    pub(super) fn challenged(
        &self,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        endpoint: &url::Url,
    ) {
        let refusal = match status {
            http::StatusCode::UNAUTHORIZED => Refusal::Unauthorized,
            http::StatusCode::FORBIDDEN => {
                let challenge = headers
                    .get_all(http::header::WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .map(|v| WWWAuthenticateParams::parse(v, endpoint))
                    .find(WWWAuthenticateParams::is_insufficient_scope);
                match challenge {
                    Some(challenge) => Refusal::InsufficientScope {
                        scope: challenge.scope,
                    },
                    None => return,
                }
            }
            _ => return,
        };
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(refusal);
    }

    fn note<E>(&self, err: &StreamableHttpError<E>)
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let refusal = match err {
            StreamableHttpError::InsufficientScope(e) => Refusal::InsufficientScope {
                scope: e.required_scope.clone(),
            },
            StreamableHttpError::AuthRequired(_) => Refusal::Unauthorized,
            _ => return,
        };
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(refusal);
    }
}

/// A Streamable HTTP client that is `C`, but notes refusals of the token in a
/// [`RefusalNote`] (when given one), and answers a request whose POST was answered with a
/// JSON-RPC error naming no request, or another one, as rmcp would not ([`correlated`]).
#[derive(Clone)]
pub struct Noting<C> {
    pub inner: C,
    pub note: Option<RefusalNote>,
}

impl<C> Noting<C> {
    fn noted<T, E>(&self, result: HttpResult<T, E>) -> HttpResult<T, E>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        if let (Err(err), Some(note)) = (&result, &self.note) {
            note.note(err);
        }
        result
    }
}

/// Whether an error's message is about the session ("No valid session ID provided",
/// "Session not found").
fn speaks_of_the_session(message: &str) -> bool {
    message.to_ascii_lowercase().contains("session")
}

/// The request `message` is, if it is one: what its POST's answer must name.
fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// A request's POST answered in JSON with a JSON-RPC error that names no request (`id:
/// null`) or another one: rmcp drops it as an answer to nothing, and the request would wait
/// for its deadline. Servers answer so when they cannot attribute the request: the SDKs'
/// servers for a session they do not know (with 400, before they said 404), the Python
/// SDK's with the id `"server-error"`, and many servers' catch-all error handlers for any
/// failure (a 500). The status is gone by now, so the words decide: an error that speaks of
/// the session, on a request made in one, is the session gone
/// ([`StreamableHttpError::SessionExpired`]: rmcp opens a new one and sends the request
/// again); any other is this request's answer (a server error fails one request, never the
/// session).
fn correlated<E>(
    request: Option<RequestId>,
    session: bool,
    response: HttpResult<StreamableHttpPostResponse, E>,
) -> HttpResult<StreamableHttpPostResponse, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let Some(id) = request else {
        return response;
    };
    match response? {
        StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(mut error), session_id)
            if error.id.as_ref() != Some(&id) =>
        {
            if session && speaks_of_the_session(&error.error.message) {
                tracing::debug!(
                    "an upstream answered a request with an error naming no request: its \
                     session is taken for gone"
                );
                return Err(StreamableHttpError::SessionExpired);
            }
            error.id = Some(id);
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(error),
                session_id,
            ))
        }
        other => Ok(other),
    }
}

type HttpResult<T, E> = Result<T, StreamableHttpError<E>>;

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Noting<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse, Self::Error> {
        let (request, session) = (request_id(&message), session_id.is_some());
        let result = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.noted(correlated(request, session, result))
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse, Self::Error> {
        let (request, session) = (request_id(&message), session_id.is_some());
        let result = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.noted(correlated(request, session, result))
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse, Self::Error> {
        let (request, session) = (request_id(&message), session_id.is_some());
        let result = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        self.noted(correlated(request, session, result))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<(), Self::Error> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>, Self::Error> {
        let result = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.noted(result)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>, Self::Error> {
        let result = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.noted(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_naming(
        id: Option<RequestId>,
    ) -> HttpResult<StreamableHttpPostResponse, std::io::Error> {
        error_saying("Bad Request: No valid session ID provided", id)
    }

    fn error_saying(
        message: &'static str,
        id: Option<RequestId>,
    ) -> HttpResult<StreamableHttpPostResponse, std::io::Error> {
        let error = rmcp::model::ErrorData::invalid_request(message, None);
        Ok(StreamableHttpPostResponse::Json(
            ServerJsonRpcMessage::error(error, id),
            None,
        ))
    }

    fn answered_id(
        response: HttpResult<StreamableHttpPostResponse, std::io::Error>,
    ) -> Option<RequestId> {
        match response {
            Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), _)) => error.id,
            other => panic!("an error answer: {other:?}"),
        }
    }

    #[test]
    fn an_error_naming_no_request_answers_the_request_or_ends_its_session() {
        let ours = RequestId::Number(7);
        for named in [None, Some(RequestId::String("server-error".into()))] {
            // Without a session: the request's answer.
            let answer = correlated(Some(ours.clone()), false, error_naming(named.clone()));
            assert_eq!(answered_id(answer), Some(ours.clone()));
            // With one: the session is gone.
            let gone = correlated(Some(ours.clone()), true, error_naming(named));
            assert!(
                matches!(gone, Err(StreamableHttpError::SessionExpired)),
                "{gone:?}"
            );
        }
        // Its own answer, and anything that is no request's, pass as they are.
        let own = correlated(Some(ours.clone()), true, error_naming(Some(ours.clone())));
        assert_eq!(answered_id(own), Some(ours));
        let notification = correlated(None, true, error_naming(None));
        assert_eq!(answered_id(notification), None);
    }

    /// A catch-all handler's 500 naming no request, in a session: the request's failure,
    /// not the session's (it would make every server error reconnect).
    #[test]
    fn an_error_naming_no_request_that_is_no_session_error_answers_the_request() {
        let ours = RequestId::Number(8);
        for id in [None, Some(RequestId::String("server-error".into()))] {
            let answer = correlated(
                Some(ours.clone()),
                true,
                error_saying("Internal server error", id),
            );
            assert_eq!(answered_id(answer), Some(ours.clone()));
        }
    }

    #[test]
    fn a_refused_post_is_noted_as_the_challenge_says() {
        let note = RefusalNote::default();
        let endpoint = url::Url::parse("http://127.0.0.1:1/mcp").expect("a URL");
        let mut headers = http::HeaderMap::new();
        note.challenged(http::StatusCode::FORBIDDEN, &headers, &endpoint);
        assert_eq!(
            note.take(),
            None,
            "a 403 without insufficient_scope is no refusal of the token"
        );
        headers.append(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static(r#"Bearer error="insufficient_scope", scope="a b""#),
        );
        note.challenged(http::StatusCode::FORBIDDEN, &headers, &endpoint);
        assert_eq!(
            note.take(),
            Some(Refusal::InsufficientScope {
                scope: Some("a b".to_owned())
            })
        );
        note.challenged(
            http::StatusCode::UNAUTHORIZED,
            &http::HeaderMap::new(),
            &endpoint,
        );
        assert_eq!(note.take(), Some(Refusal::Unauthorized));
        note.challenged(http::StatusCode::TOO_MANY_REQUESTS, &headers, &endpoint);
        assert_eq!(note.take(), None);
    }
}
