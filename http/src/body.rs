//! [`Body`], the body of every response Stasis sends: whole bytes (with an
//! exact length, so HTTP/1.1 answers carry `Content-Length`), or a stream
//! of chunks sent as they come (HTTP/1.1 chunked, HTTP/2 data frames), for
//! an actor's streamed response.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use hyper::body::{Frame, SizeHint};

/// A stream of body chunks.
pub type Chunks = Pin<Box<dyn Stream<Item = Bytes> + Send + 'static>>;

/// The body of a response (module docs).
pub struct Body {
    kind: Kind,
}

enum Kind {
    /// Whole bytes; `None` once sent.
    Whole(Option<Bytes>),
    /// Chunks as they come; the body ends when the stream does.
    Stream(Chunks),
}

impl Body {
    /// A body of `bytes`.
    #[must_use]
    pub fn new(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self {
            kind: Kind::Whole((!bytes.is_empty()).then_some(bytes)),
        }
    }

    /// An empty body.
    #[must_use]
    pub fn empty() -> Self {
        Self::new(Bytes::new())
    }

    /// A body sent chunk by chunk as `chunks` yields them (empty chunks
    /// are skipped); it ends when `chunks` does, and dropping it (the
    /// client left) drops `chunks`.
    #[must_use]
    pub fn stream(chunks: Chunks) -> Self {
        Self {
            kind: Kind::Stream(chunks),
        }
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Whole(bytes) => f
                .debug_struct("Body")
                .field("len", &bytes.as_ref().map_or(0, Bytes::len))
                .finish(),
            Kind::Stream(_) => f.debug_struct("Body").field("stream", &true).finish(),
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.kind {
            Kind::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream(chunks) => loop {
                match chunks.as_mut().poll_next(cx) {
                    Poll::Ready(Some(chunk)) if chunk.is_empty() => {}
                    Poll::Ready(Some(chunk)) => return Poll::Ready(Some(Ok(Frame::data(chunk)))),
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => return Poll::Pending,
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn whole_and_streamed_bodies_give_their_bytes() {
        let whole = Body::new("abc");
        assert_eq!(hyper::body::Body::size_hint(&whole).exact(), Some(3));
        assert_eq!(whole.collect().await.expect("body").to_bytes(), "abc");
        let chunks =
            futures_util::stream::iter([b"a".as_slice(), b"", b"bc"].map(Bytes::from_static));
        let streamed = Body::stream(Box::pin(chunks));
        assert_eq!(hyper::body::Body::size_hint(&streamed).exact(), None);
        assert_eq!(streamed.collect().await.expect("body").to_bytes(), "abc");
    }
}
