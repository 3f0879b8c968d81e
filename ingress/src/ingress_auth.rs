//! A namespace's ingress auth at the ingress ([`stasis_contract::policy`]):
//! the check of each request to an actor of a namespace that requires a
//! token ([`authenticate`]), and of the WebSockets and streams such a
//! request opens, checked again every [`REVOCATION_BOUND`] while they last
//! ([`watch`]): a token revoked or expired since, or a namespace that has
//! come to require a token the request never showed, closes them (code
//! 1008, policy violation), as a followed log on the admin API ends.

use std::sync::Arc;

use hyper::header::{AUTHORIZATION, HeaderMap};
use hyper::http::request::Parts;
use hyper::{Method, Uri};

use stasis_contract::error::ApiError;
use stasis_contract::names;
use stasis_contract::policy::IngressAuth;
use stasis_contract::sockets::SocketOp;
use stasis_control::ControlPlane;

use crate::access::{Access, REVOCATION_BOUND, authorization_of, no_longer_admits};

/// What a request showed the ingress, kept for the streams it opens.
#[derive(Debug, Clone)]
pub struct Credential {
    authorization: HeaderMap,
    method: Method,
    uri: Uri,
}

/// Checks a request to `actor` against its namespace's ingress auth; when
/// the namespace requires a token, the `Authorization` header is taken
/// out of `parts` once checked (it is the ingress's, never the guest's).
/// Either way, what the request showed is returned for [`watch`].
///
/// # Errors
/// 401 or 403 from [`Access::check_ingress`]; 500 if the setting cannot
/// be read.
pub async fn authenticate(
    control: &ControlPlane,
    access: &Access,
    parts: &mut Parts,
    actor: &str,
) -> Result<Credential, ApiError> {
    let credential = Credential {
        authorization: authorization_of(&parts.headers),
        method: parts.method.clone(),
        uri: parts.uri.clone(),
    };
    let namespace = names::namespace_of(actor);
    if control.ingress_auth(namespace).await? == IngressAuth::None {
        return Ok(credential);
    }
    check(access, &credential, namespace).await?;
    parts.headers.remove(AUTHORIZATION);
    Ok(credential)
}

async fn check(access: &Access, credential: &Credential, namespace: &str) -> Result<(), ApiError> {
    access
        .check_ingress(
            &credential.authorization,
            &credential.method,
            credential.uri.path(),
            namespace,
        )
        .await
}

/// Checks `credential` again every [`REVOCATION_BOUND`] while socket or
/// stream `socket` of `actor` is open (in a task of its own), and closes
/// it (1008) once the actor's namespace requires a token that
/// `credential` no longer is (revoked, expired, never shown).
pub fn watch(
    control: Arc<ControlPlane>,
    access: Arc<Access>,
    actor: String,
    socket: u64,
    credential: Credential,
) {
    tokio::spawn(async move {
        let namespace = names::namespace_of(&actor).to_owned();
        loop {
            tokio::time::sleep(REVOCATION_BOUND).await;
            if !control.sockets().is_open(socket) {
                return;
            }
            // A setting that cannot be read is not known to have changed.
            if control.ingress_auth(&namespace).await.ok() != Some(IngressAuth::Token) {
                continue;
            }
            match check(&access, &credential, &namespace).await {
                Err(e) if no_longer_admits(&e) => {
                    tracing::info!(actor, socket, "closing: {}", e.message());
                    let close = SocketOp::Close {
                        socket,
                        code: 1008,
                        reason: "the request's credential no longer admits it".to_owned(),
                    };
                    let _ = control.socket(&actor, close);
                    return;
                }
                _ => {}
            }
        }
    });
}
