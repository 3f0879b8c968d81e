//! An error shown with its causes ([`with_causes`]): clients such as
//! hyper's and `object_store`'s say only what failed at the top ("client
//! error (Connect)") and keep why in their sources.

/// `error` and each of its sources, joined by `: ` (a source whose text
/// the message already holds is not repeated).
#[must_use]
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}
