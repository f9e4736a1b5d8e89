//! Users' connections to OAuth servers: starting one (discovery, client registration, PKCE,
//! the authorization URL), completing it at the callback (whichever instance the user comes
//! back to), handing out a fresh access token for each upstream request (refreshed once for
//! many concurrent callers), and disconnecting (revoking where the server can).
//!
//! The OAuth protocol work is rmcp's client (`rmcp::transport::auth`); this module gives it
//! the gateway's guarded HTTP client, stores that seal what they keep, and the policy around
//! it: who may connect what, single-use `state`, single-flight refresh, typed errors that never
//! carry a secret.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, CredentialStore, OAuthClientConfig, StateStore, StoredAuthorizationState,
    StoredCredentials,
};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::{
    http::GuardedHttp,
    store::{ConnectionKey, ConnectionRow, ConnectionStatus, OAuthStore, PendingRow},
    vault::{RecordId, Vault, VaultError},
};
use crate::{
    config::{Env, OAuthConfig, ServerConfig, ServerId, TransportConfig, UpstreamOAuth},
    net::NetPolicy,
    store::StoreError,
};

/// A token this close to its expiry is refreshed before use: an upstream request takes a
/// while, and clocks differ.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// The name the gateway registers under (RFC 7591 `client_name`).
const CLIENT_NAME: &str = "mcpgate";
/// Where authorization servers send users back, under `public_url`.
pub const CALLBACK_PATH: &str = "/api/v1/oauth/callback";
/// Where the gateway's Client ID Metadata Document is served, under `public_url`.
pub const CLIENT_METADATA_PATH: &str = "/oauth/client-metadata.json";

/// Why a connection could not be made, used or ended. Messages name servers and routes,
/// never a token, code, verifier or secret.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("server `{server}` does not use OAuth (auth = \"oauth\")")]
    NotOAuth { server: String },
    #[error(
        "server `{server}` needs your own account: connect it at GET \
         /api/v1/mcp/servers/{server}/connect"
    )]
    AuthorizationRequired { server: String },
    #[error(
        "your connection to server `{server}` has expired (its authorization server refused \
         to renew it): connect again at GET /api/v1/mcp/servers/{server}/connect"
    )]
    ConnectionExpired { server: String },
    #[error(
        "server `{server}` needs more access than your connection grants (scope {scope}): \
         connect again at GET /api/v1/mcp/servers/{server}/connect"
    )]
    MoreScope { server: String, scope: String },
    #[error("this sign-in link is unknown, used or expired: start again from Connect")]
    UnknownState,
    #[error("the authorization server did not grant access ({error})")]
    Denied { error: String },
    #[error("OAuth discovery for server `{server}` failed: {reason}")]
    Discovery { server: String, reason: String },
    #[error("client registration with the authorization server of `{server}` failed: {reason}")]
    Registration { server: String, reason: String },
    #[error("the authorization server of `{server}` refused the sign-in: {reason}")]
    Exchange { server: String, reason: String },
    #[error("renewing the token for server `{server}` failed; try again shortly")]
    Refresh { server: String },
    #[error("OAuth state store: {0}")]
    Store(#[from] StoreError),
    #[error("OAuth token vault: {0}")]
    Vault(#[from] VaultError),
}

impl OAuthError {
    /// The stable code of each kind, for the API.
    pub fn code(&self) -> &'static str {
        match self {
            OAuthError::NotOAuth { .. } => "not_oauth",
            OAuthError::AuthorizationRequired { .. }
            | OAuthError::ConnectionExpired { .. }
            | OAuthError::MoreScope { .. } => "authorization_required",
            OAuthError::UnknownState => "unknown_state",
            OAuthError::Denied { .. } => "access_denied",
            OAuthError::Discovery { .. } | OAuthError::Registration { .. } => "oauth_unavailable",
            OAuthError::Exchange { .. } => "oauth_exchange_failed",
            OAuthError::Refresh { .. } => "oauth_refresh_failed",
            OAuthError::Store(_) | OAuthError::Vault(_) => "store_unavailable",
        }
    }
}

/// An access token for one upstream request: the secret, and a short digest naming it (a
/// session opened with it is keyed by the digest, never the token).
pub struct AccessToken {
    pub secret: Zeroizing<String>,
    pub digest: String,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// A user's connection, as the page and the API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionInfo {
    pub server: String,
    pub status: &'static str,
    pub scopes: Vec<String>,
    pub issuer: Option<String>,
    /// RFC 3339.
    pub connected_at: String,
}

/// One OAuth server, as configured.
struct OAuthServer {
    url: url::Url,
    oauth: UpstreamOAuth,
    http: Arc<GuardedHttp>,
}

/// The client the gateway is at an authorization server.
#[derive(Clone, Serialize, Deserialize)]
struct Client {
    id: String,
    /// From dynamic registration; a configured secret is read from the environment instead.
    secret: Option<String>,
    /// The redirect URI it was registered with.
    redirect_uri: String,
}

/// How users' own servers' OAuth traffic is held: the strict network rules and the
/// operator's host list, loosened only by the tests' loopback override.
#[derive(Debug, Clone)]
pub struct UserServerRules {
    pub allow_loopback: bool,
    /// `[user_servers] allowed_hosts`, checked again at each use (a host taken off the list
    /// is refused from then on).
    pub allowed_hosts: Vec<String>,
}

/// What a connection's record seals.
#[derive(Serialize, Deserialize)]
struct ConnectionBlob {
    credentials: StoredCredentials,
    metadata: AuthorizationMetadata,
    client: Client,
    /// The resource tokens are asked for (RFC 8707).
    resource: String,
    /// Scopes the server asked for beyond the grant (403 `insufficient_scope`): the next
    /// connection asks for them too.
    #[serde(default)]
    wanted: Vec<String>,
}

/// What a pending authorization's record seals.
#[derive(Serialize, Deserialize)]
struct PendingBlob {
    state: StoredAuthorizationState,
    metadata: AuthorizationMetadata,
    client: Client,
    resource: String,
}

/// Users' connections to every OAuth server of the configuration.
pub struct Connections {
    servers: HashMap<ServerId, Arc<OAuthServer>>,
    /// Users' own servers (`[user_servers]`) may use OAuth too: found by the connection's
    /// key in the store, reached at the strictest network rules; `None` when the feature is
    /// off.
    user_servers: Option<UserServerRules>,
    vault: Arc<Vault>,
    store: Arc<dyn OAuthStore>,
    env: Env,
    redirect_uri: String,
    /// The Client ID Metadata Document's URL, when the gateway has one (https).
    client_metadata_url: Option<String>,
    authorization_timeout: Duration,
    /// One refresh at a time per connection, in this process.
    refreshing: Mutex<HashMap<ConnectionKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .field("vault", &self.vault)
            .finish_non_exhaustive()
    }
}

/// Why [`Connections::new`] refused the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("[oauth] keys: {0}")]
    Keys(String),
    #[error("server `{server}`: {reason}")]
    Server { server: String, reason: String },
    #[error("[server] public_url is needed for OAuth servers")]
    NoPublicUrl,
}

impl Connections {
    /// The connections of `servers` that have `auth = "oauth"`; `None` when none has.
    pub fn new(
        servers: &[ServerConfig],
        config: &OAuthConfig,
        public_url: Option<&url::Url>,
        store: Arc<dyn OAuthStore>,
        env: &Env,
    ) -> Result<Option<Connections>, SetupError> {
        Connections::with_user_servers(servers, (config, public_url), store, env, None)
    }

    /// [`Connections::new`], users' own servers included when `user_servers` is given and a
    /// `public_url` is configured (without one nobody can be sent back, so they get none).
    pub fn with_user_servers(
        servers: &[ServerConfig],
        (config, public_url): (&OAuthConfig, Option<&url::Url>),
        store: Arc<dyn OAuthStore>,
        env: &Env,
        user_servers: Option<UserServerRules>,
    ) -> Result<Option<Connections>, SetupError> {
        let user_servers = user_servers.filter(|_| public_url.is_some());
        let mut oauth_servers = HashMap::new();
        for server in servers {
            let Some(oauth) = &server.oauth else { continue };
            let TransportConfig::Http(http) = &server.transport else {
                continue;
            };
            let policy = NetPolicy {
                allow_http: server.allow_http,
                allow_private: server.allow_private,
                connect_timeout: super::http::REQUEST_TIMEOUT,
                read_timeout: super::http::REQUEST_TIMEOUT,
                ..NetPolicy::default()
            };
            let http_client = GuardedHttp::new(policy).map_err(|err| SetupError::Server {
                server: server.id.to_string(),
                reason: err.to_string(),
            })?;
            oauth_servers.insert(
                server.id.clone(),
                Arc::new(OAuthServer {
                    url: http.url.clone(),
                    oauth: oauth.clone(),
                    http: Arc::new(http_client),
                }),
            );
        }
        if oauth_servers.is_empty() && user_servers.is_none() {
            return Ok(None);
        }
        let public_url = public_url.ok_or(SetupError::NoPublicUrl)?;
        let vault = Vault::from_config(&config.keys, env).map_err(SetupError::Keys)?;
        let redirect_uri = public_url
            .join(CALLBACK_PATH.trim_start_matches('/'))
            .map_err(|_| SetupError::NoPublicUrl)?
            .to_string();
        let client_metadata_url = match &config.client_metadata_url {
            Some(url) => Some(url.to_string()),
            None if public_url.scheme() == "https" => public_url
                .join(CLIENT_METADATA_PATH.trim_start_matches('/'))
                .ok()
                .map(|url| url.to_string()),
            None => None,
        };
        Ok(Some(Connections {
            servers: oauth_servers,
            user_servers,
            vault: Arc::new(vault),
            store,
            env: env.clone(),
            redirect_uri,
            client_metadata_url,
            authorization_timeout: config.authorization_timeout,
            refreshing: Mutex::new(HashMap::new()),
        }))
    }

    /// Whether `server` has `auth = "oauth"`.
    pub fn is_oauth(&self, server: &ServerId) -> bool {
        self.servers.contains_key(server)
    }

    /// Where authorization servers send users back.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// The gateway's Client ID Metadata Document (draft-ietf-oauth-client-id-metadata-document):
    /// a public client whose id is the document's own URL, redirecting to the callback; `None`
    /// without an https `public_url`.
    pub fn client_metadata(&self) -> Option<serde_json::Value> {
        let id = self.client_metadata_url.as_ref()?;
        Some(serde_json::json!({
            "client_id": id,
            "client_name": CLIENT_NAME,
            "redirect_uris": [self.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }))
    }

    fn server(&self, server: &ServerId) -> Result<Arc<OAuthServer>, OAuthError> {
        self.servers
            .get(server)
            .cloned()
            .ok_or_else(|| OAuthError::NotOAuth {
                server: server.to_string(),
            })
    }

    /// The server of `key`: a configured one, or the user's own server of that id (its
    /// address read from the store, its OAuth traffic held to the strictest rules).
    async fn server_of(&self, key: &ConnectionKey) -> Result<Arc<OAuthServer>, OAuthError> {
        let id = server_id(&key.server)?;
        let Some(rules) = self
            .user_servers
            .as_ref()
            .filter(|_| crate::gateway::is_user_server(&id))
        else {
            return self.server(&id);
        };
        let not_oauth = || OAuthError::NotOAuth {
            server: key.server.clone(),
        };
        let name = &key.server[crate::config::USER_SERVER_PREFIX.len()..];
        let row = self
            .store
            .user_servers(&key.tenant, &key.user)
            .await?
            .into_iter()
            .find(|row| row.name == name)
            .ok_or_else(not_oauth)?;
        let url = url::Url::parse(&row.url).map_err(|_| not_oauth())?;
        if !crate::config::user_host_allowed(&rules.allowed_hosts, url.host_str().unwrap_or("")) {
            return Err(not_oauth());
        }
        let policy = NetPolicy {
            allow_http: rules.allow_loopback,
            allow_loopback: rules.allow_loopback,
            connect_timeout: super::http::REQUEST_TIMEOUT,
            read_timeout: super::http::REQUEST_TIMEOUT,
            ..NetPolicy::default()
        };
        let http = GuardedHttp::new(policy).map_err(|err| OAuthError::Discovery {
            server: key.server.clone(),
            reason: err.to_string(),
        })?;
        Ok(Arc::new(OAuthServer {
            url,
            oauth: UpstreamOAuth::default(),
            http: Arc::new(http),
        }))
    }

    /// Starts connecting `key.user` to `key.server`: finds the server's authorization server,
    /// registers the gateway there if needed, and returns the URL to send the user to.
    pub async fn begin(&self, key: &ConnectionKey) -> Result<String, OAuthError> {
        let server = self.server_of(key).await?;
        let server = server.as_ref();
        let discovery = |reason: String| OAuthError::Discovery {
            server: key.server.clone(),
            reason,
        };
        let manager = AuthorizationManager::new_with_oauth_http_client(
            server.url.as_str(),
            server.http.clone(),
        )
        .await
        .map_err(|err| discovery(describe(&err)))?;
        // The server's own 401 names its metadata (and the scope it wants), as RFC 9728 §5
        // has it; well-known locations are the fallback.
        let challenge = self.challenge(server).await;
        let metadata = manager
            .resolve_metadata_from_challenge(challenge.as_deref())
            .await
            .map_err(|err| discovery(describe(&err)))?
            .metadata;
        let mut manager = manager;
        manager.set_metadata(metadata.clone());
        let client = self
            .client(&client_key(key, server), server, &mut manager, &metadata)
            .await?;

        let captured = CapturedState::default();
        manager.set_state_store(captured.clone());
        let mut request = AuthorizationRequest::new(&self.redirect_uri)
            .with_client_name(CLIENT_NAME)
            .with_preregistered_client(&client.id);
        if let Some(secret) = self.client_secret(server, &client)? {
            request = request.with_client_secret(secret.as_str());
        }
        // The configured scopes, else those the server's challenge and metadata name; and
        // what the last connection had or the server asked for since (a step-up).
        let mut scopes = if server.oauth.scopes.is_empty() {
            manager.select_scopes(None, &[])
        } else {
            server.oauth.scopes.clone()
        };
        for scope in self.previous_scopes(key).await {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        if !scopes.is_empty() {
            request = request.with_scopes(scopes.iter().map(String::as_str));
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, err)| OAuthError::Registration {
                server: key.server.clone(),
                reason: describe(&err),
            })?;
        let (csrf, state) = captured.take().ok_or_else(|| OAuthError::Registration {
            server: key.server.clone(),
            reason: "the OAuth client kept no authorization state".to_owned(),
        })?;
        let url = session.get_authorization_url().to_owned();
        let resource = url::Url::parse(&url)
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(name, _)| name == "resource")
                    .map(|(_, value)| value.into_owned())
            })
            .unwrap_or_else(|| server.url.to_string());
        let blob = PendingBlob {
            state,
            metadata,
            client,
            resource,
        };
        let state_hash = crate::digest::sha256_hex(csrf.as_bytes());
        let plaintext = Zeroizing::new(serde_json::to_vec(&blob).map_err(json_error)?);
        let sealed = self.vault.seal(&pending_id(&state_hash, key), &plaintext)?;
        let expires_at = now_micros().saturating_add(micros(self.authorization_timeout));
        self.store
            .put_pending(
                &state_hash,
                &PendingRow {
                    key: key.clone(),
                    sealed,
                    expires_at,
                },
            )
            .await?;
        Ok(url)
    }

    /// The `WWW-Authenticate` challenge the server answers a request without a token with
    /// (an MCP `initialize`), if it answers 401 or 403 with one.
    async fn challenge(&self, server: &OAuthServer) -> Option<String> {
        crate::net::check_url(&server.url, server.http.policy()).ok()?;
        let probe = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": { "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") },
            },
        });
        let response = server
            .http
            .client()
            .post(server.url.clone())
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(probe.to_string())
            .timeout(super::http::REQUEST_TIMEOUT)
            .send()
            .await
            .ok()?;
        if !matches!(response.status().as_u16(), 401 | 403) {
            return None;
        }
        let challenge = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)?
            .to_str()
            .ok()?;
        (challenge.len() <= 4096).then(|| challenge.to_owned())
    }

    /// Completes a connection from the authorization server's redirect: `state` names the
    /// authorization (once), `code` is exchanged with its PKCE verifier, `iss` is checked
    /// against the authorization server's issuer (RFC 9207). Whose connection it is comes
    /// from the stored authorization, not from the request.
    pub async fn complete(
        &self,
        state: &str,
        code: &str,
        iss: Option<&str>,
    ) -> Result<ConnectionKey, OAuthError> {
        let state_hash = crate::digest::sha256_hex(state.as_bytes());
        let pending = self
            .store
            .take_pending(&state_hash, now_micros())
            .await?
            .ok_or(OAuthError::UnknownState)?;
        let key = pending.key.clone();
        let plaintext = self
            .vault
            .open(&pending_id(&state_hash, &key), &pending.sealed)?;
        let blob: PendingBlob = serde_json::from_slice(&plaintext).map_err(json_error)?;
        let server = self.server_of(&key).await?;
        let server = server.as_ref();
        let mut manager = self
            .manager(server, &key, &blob.resource, &blob.metadata, &blob.client)
            .await?;
        manager.set_state_store(OneState {
            csrf: state.to_owned(),
            state: Mutex::new(Some(blob.state)),
        });
        manager.set_credential_store(self.credentials(
            &key,
            blob.metadata.clone(),
            blob.client.clone(),
            (blob.resource.clone(), Vec::new()),
        ));
        manager
            .exchange_code_for_token_with_issuer(code, state, iss)
            .await
            .map_err(|err| OAuthError::Exchange {
                server: key.server.clone(),
                reason: exchange_reason(&err),
            })?;
        tracing::info!(tenant = %key.tenant, user = %key.user, server = %key.server, "OAuth connection made");
        Ok(key)
    }

    /// Drops the authorization `state` names (the user refused, or the server failed).
    pub async fn abandon(&self, state: &str) -> Result<(), OAuthError> {
        let state_hash = crate::digest::sha256_hex(state.as_bytes());
        self.store.take_pending(&state_hash, now_micros()).await?;
        Ok(())
    }

    /// A current access token of `key.user` for `key.server`, refreshed first when it is
    /// about to expire: one refresh for any number of concurrent callers, the rotated refresh
    /// token sealed and stored before the new access token is handed out.
    pub async fn access_token(&self, key: &ConnectionKey) -> Result<AccessToken, OAuthError> {
        if let Some(token) = self.fresh_token(key).await? {
            return Ok(token);
        }
        let lock = {
            let mut refreshing = self
                .refreshing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            refreshing.entry(key.clone()).or_default().clone()
        };
        let _held = lock.lock().await;
        // Another instance may be renewing it too: one at a time across all of them.
        let _shared = self.store.lock_refresh(key).await?;
        // Another caller may have refreshed while this one waited.
        if let Some(token) = self.fresh_token(key).await? {
            return Ok(token);
        }
        let result = self.refresh(key).await;
        {
            let mut refreshing = self
                .refreshing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if Arc::strong_count(&lock) <= 2 {
                refreshing.remove(key);
            }
        }
        result
    }

    /// The stored token when it is not about to expire; `None` when it must be refreshed.
    async fn fresh_token(&self, key: &ConnectionKey) -> Result<Option<AccessToken>, OAuthError> {
        let (_, blob) = self.load(key).await?;
        let Some(response) = blob.credentials.token_response.as_ref() else {
            return Err(OAuthError::AuthorizationRequired {
                server: key.server.clone(),
            });
        };
        let fresh = match (response.expires_in(), blob.credentials.token_received_at) {
            (Some(lifetime), Some(received)) => {
                let expires = received.saturating_add(lifetime.as_secs());
                let margin = REFRESH_MARGIN.min(lifetime / 2).as_secs();
                now_secs().saturating_add(margin) < expires
            }
            // No lifetime given: used until the server refuses it.
            _ => true,
        };
        Ok(fresh.then(|| token(response.access_token().secret())))
    }

    async fn refresh(&self, key: &ConnectionKey) -> Result<AccessToken, OAuthError> {
        let (_, blob) = self.load(key).await?;
        let server = self.server_of(key).await?;
        let server = server.as_ref();
        let mut manager = self
            .manager(server, key, &blob.resource, &blob.metadata, &blob.client)
            .await?;
        manager.set_credential_store(self.credentials(
            key,
            blob.metadata.clone(),
            blob.client.clone(),
            (blob.resource.clone(), blob.wanted.clone()),
        ));
        match manager.refresh_token().await {
            Ok(response) => {
                tracing::info!(tenant = %key.tenant, user = %key.user, server = %key.server, "OAuth token refreshed");
                Ok(token(response.access_token().secret()))
            }
            Err(AuthError::TokenRefreshRejected(_) | AuthError::AuthorizationRequired) => {
                // The store marked it expired (a refused refresh token); a connection without
                // a refresh token is expired the same way.
                self.expire(key).await?;
                tracing::warn!(tenant = %key.tenant, user = %key.user, server = %key.server, "OAuth connection expired: the refresh was refused");
                Err(OAuthError::ConnectionExpired {
                    server: key.server.clone(),
                })
            }
            Err(err) => {
                tracing::warn!(server = %key.server, error = describe_kind(&err), "OAuth token refresh failed");
                Err(OAuthError::Refresh {
                    server: key.server.clone(),
                })
            }
        }
    }

    async fn expire(&self, key: &ConnectionKey) -> Result<(), OAuthError> {
        if let Some(row) = self.store.connection(key).await? {
            self.store
                .expire_connection(key, &row.sealed, now_micros())
                .await?;
        }
        Ok(())
    }

    /// Ends the connection: its tokens are revoked where the authorization server offers
    /// revocation (RFC 7009; a failure there is logged, the connection is removed anyway).
    /// Whether there was one.
    pub async fn disconnect(&self, key: &ConnectionKey) -> Result<bool, OAuthError> {
        let server = self.server_of(key).await?;
        let server = server.as_ref();
        let Some(row) = self.store.connection(key).await? else {
            return Ok(false);
        };
        if let Ok(plaintext) = self.vault.open(&connection_id(key), &row.sealed)
            && let Ok(blob) = serde_json::from_slice::<ConnectionBlob>(&plaintext)
        {
            self.revoke(server, &blob).await;
        }
        Ok(self.store.delete_connection(key).await?)
    }

    async fn revoke(&self, server: &OAuthServer, blob: &ConnectionBlob) {
        let Some(endpoint) = blob
            .metadata
            .additional_fields
            .get("revocation_endpoint")
            .and_then(|v| v.as_str())
            .and_then(|text| url::Url::parse(text).ok())
        else {
            return;
        };
        if crate::net::check_url(&endpoint, server.http.policy()).is_err() {
            return;
        }
        let Some(response) = blob.credentials.token_response.as_ref() else {
            return;
        };
        let secret = match self.client_secret(server, &blob.client) {
            Ok(secret) => secret,
            Err(_) => return,
        };
        let mut tokens = vec![(response.access_token().secret().clone(), "access_token")];
        if let Some(refresh) = response.refresh_token() {
            tokens.insert(0, (refresh.secret().clone(), "refresh_token"));
        }
        for (value, hint) in tokens {
            let value = Zeroizing::new(value);
            let body = {
                let mut form = url::form_urlencoded::Serializer::new(String::new());
                form.append_pair("token", &value)
                    .append_pair("token_type_hint", hint);
                if secret.is_none() {
                    form.append_pair("client_id", &blob.client.id);
                }
                Zeroizing::new(form.finish())
            };
            let mut request = server
                .http
                .client()
                .post(endpoint.clone())
                .header(
                    http::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(body.to_string())
                .timeout(super::http::REQUEST_TIMEOUT);
            if let Some(secret) = &secret {
                request = request.basic_auth(&blob.client.id, Some(secret.as_str()));
            }
            match request.send().await {
                Ok(answer) if answer.status().is_success() => {}
                Ok(answer) => {
                    tracing::warn!(
                        status = answer.status().as_u16(),
                        "OAuth token revocation refused"
                    );
                }
                Err(_) => tracing::warn!("OAuth token revocation failed to reach the server"),
            }
        }
    }

    /// Removes the connection without revoking anything (its server is gone, so nothing can
    /// be reached to revoke at); whether there was one.
    pub async fn forget(&self, key: &ConnectionKey) -> Result<bool, OAuthError> {
        Ok(self.store.delete_connection(key).await?)
    }

    /// A user's connection to one server, if any.
    pub async fn status(&self, key: &ConnectionKey) -> Result<Option<ConnectionInfo>, OAuthError> {
        Ok(self
            .store
            .connection(key)
            .await?
            .map(|row| info(key.server.clone(), &row)))
    }

    /// Drops authorizations nobody finished.
    pub async fn purge_expired(&self) -> Result<u64, OAuthError> {
        Ok(self.store.purge_pending(now_micros()).await?)
    }

    async fn load(
        &self,
        key: &ConnectionKey,
    ) -> Result<(ConnectionRow, ConnectionBlob), OAuthError> {
        let Some(row) = self.store.connection(key).await? else {
            return Err(OAuthError::AuthorizationRequired {
                server: key.server.clone(),
            });
        };
        if row.status == ConnectionStatus::Expired {
            return Err(OAuthError::ConnectionExpired {
                server: key.server.clone(),
            });
        }
        let plaintext = self.vault.open(&connection_id(key), &row.sealed)?;
        let blob = serde_json::from_slice(&plaintext).map_err(json_error)?;
        Ok((row, blob))
    }

    /// The client to use at the authorization server: the configured one, else one this
    /// gateway registered before (for this redirect URI), else a new dynamic registration.
    async fn client(
        &self,
        server_name: &str,
        server: &OAuthServer,
        manager: &mut AuthorizationManager,
        metadata: &AuthorizationMetadata,
    ) -> Result<Client, OAuthError> {
        let registration = |reason: String| OAuthError::Registration {
            server: server_name.to_owned(),
            reason,
        };
        if let Some(template) = &server.oauth.client_id {
            let id = template
                .resolve(&self.env)
                .map_err(|reason| registration(format!("client_id: {reason}")))?;
            return Ok(Client {
                id: id.expose().to_owned(),
                secret: None,
                redirect_uri: self.redirect_uri.clone(),
            });
        }
        // An authorization server that reads Client ID Metadata Documents takes the document's
        // URL as the client id: nothing to register.
        let reads_documents = metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        if reads_documents && let Some(url) = &self.client_metadata_url {
            return Ok(Client {
                id: url.clone(),
                secret: None,
                redirect_uri: self.redirect_uri.clone(),
            });
        }
        let issuer = metadata
            .issuer
            .clone()
            .unwrap_or_else(|| metadata.authorization_endpoint.clone());
        let record = client_id(server_name, &issuer);
        if let Some(sealed) = self.store.client(server_name, &issuer).await? {
            let plaintext = self.vault.open(&record, &sealed)?;
            let client: Client = serde_json::from_slice(&plaintext).map_err(json_error)?;
            if client.redirect_uri == self.redirect_uri {
                return Ok(client);
            }
        }
        if metadata.registration_endpoint.is_none() {
            return Err(registration(
                "the authorization server offers no dynamic registration; configure \
                 oauth.client_id (and client_secret) for this server"
                    .to_owned(),
            ));
        }
        let scopes: Vec<&str> = server.oauth.scopes.iter().map(String::as_str).collect();
        let registered = manager
            .register_client(CLIENT_NAME, &self.redirect_uri, &scopes)
            .await
            .map_err(|err| registration(describe(&err)))?;
        let client = Client {
            id: registered.client_id.clone(),
            secret: registered.client_secret.clone(),
            redirect_uri: self.redirect_uri.clone(),
        };
        let plaintext = Zeroizing::new(serde_json::to_vec(&client).map_err(json_error)?);
        let sealed = self.vault.seal(&record, &plaintext)?;
        self.store.put_client(server_name, &issuer, &sealed).await?;
        Ok(client)
    }

    /// The client's secret: the configured one (from the environment) or the registered one.
    fn client_secret(
        &self,
        server: &OAuthServer,
        client: &Client,
    ) -> Result<Option<Zeroizing<String>>, OAuthError> {
        if let Some(template) = &server.oauth.client_secret {
            let secret =
                template
                    .resolve(&self.env)
                    .map_err(|reason| OAuthError::Registration {
                        server: String::new(),
                        reason: format!("client_secret: {reason}"),
                    })?;
            return Ok(Some(Zeroizing::new(secret.expose().to_owned())));
        }
        Ok(client.secret.clone().map(Zeroizing::new))
    }

    /// rmcp's client for an exchange or a refresh: metadata known, client configured.
    async fn manager(
        &self,
        server: &OAuthServer,
        key: &ConnectionKey,
        resource: &str,
        metadata: &AuthorizationMetadata,
        client: &Client,
    ) -> Result<AuthorizationManager, OAuthError> {
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(resource, server.http.clone())
                .await
                .map_err(|err| OAuthError::Discovery {
                    server: key.server.clone(),
                    reason: describe(&err),
                })?;
        manager.set_metadata(metadata.clone());
        let mut config = OAuthClientConfig::new(&client.id, &client.redirect_uri);
        if let Some(secret) = self.client_secret(server, client)? {
            config = config.with_client_secret(secret.as_str());
        }
        manager
            .configure_client(config)
            .map_err(|err| OAuthError::Registration {
                server: key.server.clone(),
                reason: describe(&err),
            })?;
        Ok(manager)
    }

    fn credentials(
        &self,
        key: &ConnectionKey,
        metadata: AuthorizationMetadata,
        client: Client,
        (resource, wanted): (String, Vec<String>),
    ) -> SealedCredentials {
        SealedCredentials {
            key: key.clone(),
            store: self.store.clone(),
            vault: self.vault.clone(),
            metadata,
            client,
            resource,
            wanted,
        }
    }

    /// The server refused `key.user`'s token: for want of `scope` (noted, so connecting again
    /// asks for it), or outright (the connection is marked expired). Either way the user
    /// must connect again.
    pub async fn refused(
        &self,
        key: &ConnectionKey,
        scope: Option<&str>,
    ) -> Result<OAuthError, OAuthError> {
        let Some(scope) = scope else {
            self.expire(key).await?;
            return Ok(OAuthError::ConnectionExpired {
                server: key.server.clone(),
            });
        };
        let (row, mut blob) = self.load(key).await?;
        for wanted in scope.split(' ').filter(|s| !s.is_empty()).take(32) {
            if !blob.wanted.iter().any(|w| w == wanted)
                && !blob.credentials.granted_scopes.iter().any(|g| g == wanted)
            {
                blob.wanted.push(wanted.to_owned());
            }
        }
        let plaintext = Zeroizing::new(serde_json::to_vec(&blob).map_err(json_error)?);
        let sealed = self.vault.seal(&connection_id(key), &plaintext)?;
        self.store
            .put_connection(
                key,
                &ConnectionRow {
                    sealed,
                    updated_at: now_micros(),
                    ..row
                },
            )
            .await?;
        Ok(OAuthError::MoreScope {
            server: key.server.clone(),
            scope: scope.to_owned(),
        })
    }

    /// Scopes a new connection of `key` asks for besides those selected: what the last one
    /// was granted and what the server asked for since.
    async fn previous_scopes(&self, key: &ConnectionKey) -> Vec<String> {
        let Ok(Some(row)) = self.store.connection(key).await else {
            return Vec::new();
        };
        let Ok(plaintext) = self.vault.open(&connection_id(key), &row.sealed) else {
            return Vec::new();
        };
        let Ok(blob) = serde_json::from_slice::<ConnectionBlob>(&plaintext) else {
            return Vec::new();
        };
        let mut scopes = blob.credentials.granted_scopes;
        scopes.extend(blob.wanted);
        scopes
    }
}

/// Users tried for a listing token, most recently renewed first.
const LISTING_CANDIDATES: usize = 5;

impl crate::upstream::oauth::ListingTokens for Connections {
    fn listing_token<'a>(
        &'a self,
        server: &'a ServerId,
    ) -> futures::future::BoxFuture<'a, Option<Zeroizing<String>>> {
        Box::pin(async move {
            let keys = match self
                .store
                .server_connections(server.as_str(), LISTING_CANDIDATES)
                .await
            {
                Ok(keys) => keys,
                Err(err) => {
                    tracing::warn!(%server, error = %err, "no OAuth connection could be read to list the server");
                    return None;
                }
            };
            for key in keys {
                match self.access_token(&key).await {
                    Ok(token) => return Some(token.secret),
                    Err(err) => {
                        tracing::debug!(%server, code = err.code(), error = %err, "a connection could not list the server");
                    }
                }
            }
            None
        })
    }
}

/// rmcp's credential store for one connection: what it saves is sealed and stored at once,
/// before rmcp hands the new token out.
struct SealedCredentials {
    key: ConnectionKey,
    store: Arc<dyn OAuthStore>,
    vault: Arc<Vault>,
    metadata: AuthorizationMetadata,
    client: Client,
    resource: String,
    wanted: Vec<String>,
}

fn store_failure(err: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(err.to_string())
}

#[async_trait]
impl CredentialStore for SealedCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(row) = self
            .store
            .connection(&self.key)
            .await
            .map_err(store_failure)?
        else {
            return Ok(None);
        };
        let plaintext = self
            .vault
            .open(&connection_id(&self.key), &row.sealed)
            .map_err(store_failure)?;
        let blob: ConnectionBlob = serde_json::from_slice(&plaintext).map_err(store_failure)?;
        Ok(Some(blob.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let now = now_micros();
        let connected_at = match self
            .store
            .connection(&self.key)
            .await
            .map_err(store_failure)?
        {
            // A refresh keeps when the user connected.
            Some(row) if row.status == ConnectionStatus::Connected => row.connected_at,
            _ => now,
        };
        let scopes = credentials.granted_scopes.join(" ");
        let issuer = credentials
            .issuer
            .clone()
            .or_else(|| self.metadata.issuer.clone());
        let blob = ConnectionBlob {
            credentials,
            metadata: self.metadata.clone(),
            client: self.client.clone(),
            resource: self.resource.clone(),
            wanted: self.wanted.clone(),
        };
        let plaintext = Zeroizing::new(serde_json::to_vec(&blob).map_err(store_failure)?);
        let sealed = self
            .vault
            .seal(&connection_id(&self.key), &plaintext)
            .map_err(store_failure)?;
        self.store
            .put_connection(
                &self.key,
                &ConnectionRow {
                    status: ConnectionStatus::Connected,
                    issuer,
                    scopes,
                    sealed,
                    connected_at,
                    updated_at: now,
                },
            )
            .await
            .map_err(store_failure)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store
            .delete_connection(&self.key)
            .await
            .map(|_| ())
            .map_err(store_failure)
    }
}

/// Catches the authorization state rmcp makes for a new authorization URL, which
/// [`Connections::begin`] then seals and stores with the rest of what the callback needs.
#[derive(Clone, Default)]
struct CapturedState {
    state: Arc<Mutex<Option<(String, StoredAuthorizationState)>>>,
}

impl CapturedState {
    fn take(&self) -> Option<(String, StoredAuthorizationState)> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[async_trait]
impl StateStore for CapturedState {
    async fn save(
        &self,
        csrf_token: &str,
        state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((csrf_token.to_owned(), state));
        Ok(())
    }

    async fn load(&self, _csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(None)
    }

    async fn delete(&self, _csrf_token: &str) -> Result<(), AuthError> {
        Ok(())
    }
}

/// The one authorization state a callback brought back (already taken from the store).
struct OneState {
    csrf: String,
    state: Mutex<Option<StoredAuthorizationState>>,
}

#[async_trait]
impl StateStore for OneState {
    async fn save(
        &self,
        _csrf_token: &str,
        _state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        Ok(())
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        if csrf_token != self.csrf {
            return Ok(None);
        }
        Ok(self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    async fn delete(&self, _csrf_token: &str) -> Result<(), AuthError> {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }
}

fn connection_id(key: &ConnectionKey) -> RecordId<'_> {
    RecordId {
        kind: "connection",
        parts: vec![&key.tenant, &key.user, &key.server],
    }
}

fn pending_id<'a>(state_hash: &'a str, key: &'a ConnectionKey) -> RecordId<'a> {
    RecordId {
        kind: "pending",
        parts: vec![state_hash, &key.tenant, &key.user, &key.server],
    }
}

fn client_id<'a>(server: &'a str, issuer: &'a str) -> RecordId<'a> {
    RecordId {
        kind: "client",
        parts: vec![server, issuer],
    }
}

/// Under what name the gateway's client at an authorization server is kept: the server's id,
/// and for a user's own server (whose id is theirs alone, not the gateway's) also whose it is
/// and where, so no client registered for one user's server is reused for another's.
fn client_key(key: &ConnectionKey, server: &OAuthServer) -> String {
    match key.server.starts_with(crate::config::USER_SERVER_PREFIX) {
        true => {
            let owner = format!("{}\0{}\0{}", key.tenant, key.user, server.url);
            format!(
                "{}#{}",
                key.server,
                &crate::digest::sha256_hex(owner.as_bytes())[..16]
            )
        }
        false => key.server.clone(),
    }
}

fn server_id(server: &str) -> Result<ServerId, OAuthError> {
    ServerId::new(server).ok_or_else(|| OAuthError::NotOAuth {
        server: server.to_owned(),
    })
}

fn token(secret: &str) -> AccessToken {
    AccessToken {
        digest: crate::digest::sha256_hex(secret.as_bytes())[..16].to_owned(),
        secret: Zeroizing::new(secret.to_owned()),
    }
}

fn info(server: String, row: &ConnectionRow) -> ConnectionInfo {
    ConnectionInfo {
        server,
        status: row.status.as_str(),
        scopes: row
            .scopes
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        issuer: row.issuer.clone(),
        connected_at: crate::store::rfc3339(from_micros(row.connected_at)),
    }
}

fn json_error(err: serde_json::Error) -> OAuthError {
    OAuthError::Store(StoreError::Corrupt(format!(
        "an OAuth record does not parse: {err}"
    )))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn from_micros(micros: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

/// What went wrong in discovery or registration, for operators: rmcp's messages there name
/// URLs and reasons, never credentials.
fn describe(err: &AuthError) -> String {
    match err {
        // These carry response text from the token endpoint.
        AuthError::TokenExchangeFailed(_)
        | AuthError::TokenRefreshFailed(_)
        | AuthError::TokenRefreshRejected(_)
        | AuthError::CredentialStoreError(_)
        | AuthError::ClientCredentialsError(_) => describe_kind(err).to_owned(),
        other => {
            let mut text = other.to_string();
            text.truncate(300);
            text
        }
    }
}

/// The kind of an rmcp OAuth error, for logs.
fn describe_kind(err: &AuthError) -> &'static str {
    match err {
        AuthError::AuthorizationRequired => "authorization required",
        AuthError::AuthorizationFailed(_) => "authorization failed",
        AuthError::TokenExchangeFailed(_) => "token exchange failed",
        AuthError::TokenRefreshFailed(_) => "token refresh failed",
        AuthError::TokenRefreshRejected(_) => "refresh token rejected",
        AuthError::CredentialStoreError(_) => "credential store failed",
        AuthError::HttpError(_) => "HTTP request failed",
        AuthError::MetadataError(_) => "metadata unusable",
        AuthError::DiscoveryRequestFailed { .. } => "discovery request failed",
        AuthError::PkceUnsupported => "PKCE S256 unsupported",
        AuthError::NoAuthorizationSupport => "no authorization support found",
        AuthError::RegistrationFailed(_) => "registration failed",
        AuthError::AuthorizationServerMismatch { .. } => "issuer mismatch (RFC 9207)",
        AuthError::AuthorizationServerMissingIssuer { .. } => "issuer missing (RFC 9207)",
        _ => "OAuth error",
    }
}

/// Why an exchange failed, safe to show the user: the kind, and for an error answer of the
/// token endpoint its RFC 6749 error code only.
fn exchange_reason(err: &AuthError) -> String {
    match err {
        AuthError::TokenExchangeFailed(text) => {
            let code = [
                "invalid_grant",
                "invalid_client",
                "unauthorized_client",
                "invalid_request",
                "invalid_scope",
                "invalid_target",
            ]
            .into_iter()
            .find(|code| text.contains(code));
            match code {
                Some(code) => format!("token exchange failed ({code})"),
                None => "token exchange failed".to_owned(),
            }
        }
        other => describe_kind(other).to_owned(),
    }
}
