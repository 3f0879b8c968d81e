//! The web console on the admin port (`/ui/`): a page, its script and its
//! style sheet, built into the binary. They hold no data and are served
//! without the token; everything the page shows it reads from the `/v1`
//! routes with the token the user gives it (kept in the browser tab's
//! session storage, sent as `Authorization: Bearer`), so what the token
//! guards stays guarded. The page itself is `console/console.js`, its
//! lists (actors by page and filter, templates and rollouts)
//! `console/lists.js`, and its charts (request rate, latency percentiles
//! and memory, computed in the browser from `/metrics` and the lists)
//! `console/charts.js`.

use hyper::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderValue, LOCATION};
use hyper::{Method, Response, StatusCode};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_http::body::Body;

/// Where the console is served.
pub const PREFIX: &str = "/ui";

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const CHARTS: &str = include_str!("console/charts.js");
const LISTS: &str = include_str!("console/lists.js");
const STYLE: &str = include_str!("console/console.css");

/// Whether `path` is the console's.
#[must_use]
pub fn is_console(path: &str) -> bool {
    path == PREFIX || path.starts_with("/ui/")
}

/// The console's answer to `method path` (a path [`is_console`] took).
///
/// # Errors
/// 405 for a method other than GET and HEAD; 404 for a file it does not
/// have.
pub fn serve(method: &Method, path: &str) -> Result<Response<Body>, ApiError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(ApiError::new(
            ErrorKind::MethodNotAllowed,
            format!("method {method} not allowed on {path}; use GET"),
        ));
    }
    let (body, content_type) = match path {
        "/ui" => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
            response
                .headers_mut()
                .insert(LOCATION, HeaderValue::from_static("/ui/"));
            return Ok(response);
        }
        "/ui/" | "/ui/index.html" => (INDEX, "text/html; charset=utf-8"),
        "/ui/console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/ui/charts.js" => (CHARTS, "text/javascript; charset=utf-8"),
        "/ui/lists.js" => (LISTS, "text/javascript; charset=utf-8"),
        "/ui/console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return Err(ApiError::not_found(format!("no console file {path}"))),
    };
    let mut response = Response::new(Body::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // The page runs only its own script and talks only to this origin.
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             frame-ancestors 'none'",
        ),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_files_are_served_and_nothing_else() {
        let page = serve(&Method::GET, "/ui/").expect("page");
        assert_eq!(page.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        for script in ["/ui/charts.js", "/ui/lists.js", "/ui/console.js"] {
            assert!(INDEX.contains(script), "{script}");
            let served = serve(&Method::GET, script).expect("script");
            assert_eq!(
                served.headers()[CONTENT_TYPE],
                "text/javascript; charset=utf-8"
            );
        }
        assert_eq!(
            serve(&Method::GET, "/ui").expect("redirect").status(),
            StatusCode::MOVED_PERMANENTLY
        );
        assert!(serve(&Method::GET, "/ui/../stasis.db").is_err());
        assert!(serve(&Method::POST, "/ui/").is_err());
    }
}
