//! Where snapshots are kept, as given to `--snapshot-store`: [`StoreUrl`],
//! parsed from `local`, `file:///ABS/PATH` or `s3://BUCKET[/PREFIX]` and
//! printed back in the same form.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The accepted forms, for error messages.
const FORMS: &str = "expected `local`, `file:///ABSOLUTE/PATH` or `s3://BUCKET[/PREFIX]`";

/// A snapshot store location (the value of `--snapshot-store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `local`: the data dir's `snapshots/` folder
    /// ([`LocalSnapshotStore`](crate::snapshot_files::LocalSnapshotStore)).
    Local,
    /// `file:///ABS/PATH`: an object store in a local (possibly shared)
    /// folder, given by its absolute path.
    File(PathBuf),
    /// `s3://BUCKET[/PREFIX]`: an S3 bucket, with every object under
    /// `PREFIX/` (empty: at the bucket's root). `PREFIX` has no leading or
    /// trailing `/` and no empty, `.` or `..` segment.
    S3 {
        /// The bucket name.
        bucket: String,
        /// The key prefix, `/`-separated, without leading or trailing `/`.
        prefix: String,
    },
}

/// Why a `--snapshot-store` value was refused: one line naming the flag,
/// the value, the problem and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--snapshot-store {value:?}: {problem}; {FORMS}")]
pub struct StoreUrlError {
    value: String,
    problem: &'static str,
}

impl FromStr for StoreUrl {
    type Err = StoreUrlError;

    fn from_str(value: &str) -> Result<Self, StoreUrlError> {
        let refuse = |problem| StoreUrlError {
            value: value.to_owned(),
            problem,
        };
        if value == "local" {
            return Ok(Self::Local);
        }
        if let Some(path) = value.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(refuse(
                    "a file:// store needs an absolute path (file:///...)",
                ));
            }
            let path = path.trim_end_matches('/');
            if path.is_empty() {
                return Err(refuse("a file:// store cannot be the root folder"));
            }
            if path.split('/').any(|part| part == "." || part == "..") {
                return Err(refuse("a file:// path cannot contain . or .. segments"));
            }
            return Ok(Self::File(PathBuf::from(path)));
        }
        if let Some(rest) = value.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.contains('@') {
                // Not echoed: what precedes the @ may be a secret key.
                return Err(StoreUrlError {
                    value: "s3://...@...".to_owned(),
                    problem: "credentials do not go in the URL (they would show in logs); give them as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                });
            }
            if bucket.is_empty() {
                return Err(refuse("an s3:// store needs a bucket name"));
            }
            let bucket_ok = bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
            if !bucket_ok {
                return Err(refuse(
                    "a bucket name has only letters, digits, '-', '.' and '_'",
                ));
            }
            let prefix = prefix.trim_end_matches('/');
            let bad_segment = |part: &str| {
                part.is_empty() || part == "." || part == ".." || part.chars().any(char::is_control)
            };
            if !prefix.is_empty() && prefix.split('/').any(bad_segment) {
                return Err(refuse(
                    "an s3:// prefix cannot have empty, . or .. segments or control characters",
                ));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            });
        }
        Err(refuse("unknown kind of store"))
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local => f.write_str("local"),
            Self::File(path) => write!(f, "file://{}", path.display()),
            Self::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Self::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_parse_and_print_back() {
        for (text, url) in [
            ("local", StoreUrl::Local),
            ("file:///srv/snaps", StoreUrl::File("/srv/snaps".into())),
            (
                "s3://bucket",
                StoreUrl::S3 {
                    bucket: "bucket".into(),
                    prefix: String::new(),
                },
            ),
            (
                "s3://bucket/a/b",
                StoreUrl::S3 {
                    bucket: "bucket".into(),
                    prefix: "a/b".into(),
                },
            ),
        ] {
            assert_eq!(text.parse::<StoreUrl>(), Ok(url.clone()), "{text}");
            assert_eq!(url.to_string(), text);
        }
        assert_eq!(
            "s3://bucket/a/".parse::<StoreUrl>().map(|u| u.to_string()),
            Ok("s3://bucket/a".to_owned())
        );
    }

    #[test]
    fn bad_forms_are_refused_in_one_line() {
        for bad in [
            "",
            "locale",
            "file://relative/path",
            "file:///",
            "file:///a/../b",
            "s3://",
            "s3:///prefix",
            "s3://b/a//c",
            "s3://b/./c",
            "s3://bad bucket",
            "s3://AKID:hunter2@bucket/p",
            "http://x",
        ] {
            let err = bad.parse::<StoreUrl>().expect_err(bad).to_string();
            assert!(err.starts_with("--snapshot-store "), "{err}");
            assert!(err.ends_with(FORMS), "{err}");
            assert!(!err.contains('\n'), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
