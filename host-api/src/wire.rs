//! The wire format of [`Request`](crate::Request) and
//! [`Response`](crate::Response), byte by byte, for guests written in any
//! language.
//!
//! The host and the Rust guest SDK encode with bincode 2 (`bincode` 2.0.1,
//! `config::standard()` with a limit of [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES)) through serde.
//! This page describes the bytes that configuration produces and accepts, so
//! a guest can speak the ABI without bincode; `guest-sdk-c/stasis.h` is such
//! a guest. The examples below are checked by this module's tests against
//! the real encoder: the test reads the hex out of this very text.
//!
//! # Building blocks
//!
//! There is no header, no magic number, no alignment and no padding: a
//! message is its fields, in the order given, back to back.
//!
//! * **`u8`**: one byte, as is.
//! * **varint** (every integer wider than a byte: the `u16` status and all
//!   lengths and counts, which bincode writes as `u64`): the first byte `b`
//!   says how to read it:
//!
//!   | first byte   | value                                            |
//!   |--------------|--------------------------------------------------|
//!   | `0x00..=0xfa` (0–250) | `b` itself; nothing follows             |
//!   | `0xfb` (251) | the next 2 bytes, a little-endian `u16`          |
//!   | `0xfc` (252) | the next 4 bytes, a little-endian `u32`          |
//!   | `0xfd` (253) | the next 8 bytes, a little-endian `u64`          |
//!   | `0xfe` (254) | the next 16 bytes, a `u128` (never valid here)   |
//!   | `0xff`       | invalid                                          |
//!
//!   Encoders write the shortest form (`250` is `fa`, `251` is `fb fb 00`,
//!   `65535` is `fb ff ff`, `65536` is `fc 00 00 01 00`). The decoder also
//!   accepts a longer form whose value fits the field (`fb 05 00` is `5`),
//!   but refuses a form wider than the field: the `u16` status accepts only
//!   one byte or `fb`; lengths accept up to `fd`.
//! * **string**: a varint byte length, then that many bytes of UTF-8, no
//!   terminator. The decoder refuses invalid UTF-8.
//! * **bytes** (`Vec<u8>`): a varint length, then that many raw bytes.
//! * **list of T**: a varint count, then that many T back to back.
//! * **header** (`(String, Vec<u8>)`): a string (the name), then bytes (the
//!   value).
//!
//! # Request (host to guest)
//!
//! | # | field            | encoding        | notes                                 |
//! |---|------------------|-----------------|---------------------------------------|
//! | 1 | `method`         | string          | upper case, e.g. `POST`               |
//! | 2 | `uri`            | string          | path and query, starts with `/`       |
//! | 3 | `headers`        | list of header  | names lower case, in arrival order    |
//! | 4 | `body`           | bytes           | the whole body                        |
//! | 5 | `context.actor`  | string          | the actor's name                      |
//! | 6 | `context.worker` | string          | the worker's name, e.g. `worker-1`    |
//!
//! # Response (guest to host)
//!
//! | # | field     | encoding        | notes                                        |
//! |---|-----------|-----------------|----------------------------------------------|
//! | 1 | `status`  | varint (`u16`)  | 100–999, else the host answers 502           |
//! | 2 | `headers` | list of header  | names must be valid UTF-8                    |
//! | 3 | `body`    | bytes           | the whole body                               |
//!
//! # Whole messages
//!
//! * A buffer holds exactly one message: bytes left over after it make the
//!   decoder fail ([`WireError::Trailing`](crate::WireError::Trailing)), and
//!   so does a buffer that ends inside a field.
//! * A message may not claim more than [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES) (256 MiB) in
//!   total: a length beyond what is left of that budget is refused before
//!   anything is allocated.
//! * The host writes the request into the buffer the guest returned from
//!   `stasis_alloc(len)` and passes `(ptr, len)` to `stasis_handle`, which
//!   returns the response's `(ptr << 32) | len` (see the crate docs).
//!
//! # Examples
//!
//! Each block is one message; the first column is the bytes in hex, the
//! rest of the line says what they are.
//!
//! Example `request_get`: `GET /`, one header `host: a`, no body, actor `c1`
//! on worker `w`:
//!
//! ```text
//! 03 47 45 54       method: length 3, "GET"
//! 01 2f             uri: length 1, "/"
//! 01                headers: 1 entry
//! 04 68 6f 73 74    name: length 4, "host"
//! 01 61             value: length 1, "a"
//! 00                body: length 0
//! 02 63 31          context.actor: length 2, "c1"
//! 01 77             context.worker: length 1, "w"
//! ```
//!
//! Example `response_text`: `Response::text(200, "ok\n")`:
//!
//! ```text
//! c8                status: 200 (one byte, below 251)
//! 01                headers: 1 entry
//! 0c 63 6f 6e 74 65 6e 74 2d 74 79 70 65
//!                   name: length 12, "content-type"
//! 19 74 65 78 74 2f 70 6c 61 69 6e 3b 20 63 68 61 72 73 65 74 3d 75 74 66 2d 38
//!                   value: length 25, "text/plain; charset=utf-8"
//! 03 6f 6b 0a       body: length 3, "ok\n"
//! ```
//!
//! Example `response_404`: status 404 (needs the `fb` form), no headers,
//! body `x`:
//!
//! ```text
//! fb 94 01          status: 0xfb, then 404 as u16 little-endian
//! 00                headers: 0 entries
//! 01 78             body: length 1, "x"
//! ```
//!
//! A body of 300 bytes starts with `fb 2c 01` (300 as `u16`), one of 70,000
//! bytes with `fc 70 11 01 00`.

#[cfg(test)]
mod tests {
    use crate::{
        Context, Request, Response, WireError, decode_request, decode_response, encode_request,
        encode_response,
    };

    /// This file; the examples are read out of its doc comment.
    const SOURCE: &str = include_str!("wire.rs");

    /// The bytes of the doc example named `name`: the hex pairs that start
    /// each line of the first ```` ```text ```` block after
    /// ``Example `name`:``.
    fn example(name: &str) -> Vec<u8> {
        let marker = format!("//! Example `{name}`:");
        let start = SOURCE
            .find(&marker)
            .unwrap_or_else(|| panic!("no example {name} in the docs"));
        let mut lines = SOURCE[start..].lines().map(|l| {
            l.strip_prefix("//!")
                .unwrap_or_else(|| panic!("example {name} leaves the doc comment"))
                .trim()
        });
        lines
            .by_ref()
            .find(|l| *l == "```text")
            .expect("a text block");
        let mut bytes = Vec::new();
        for line in lines.take_while(|l| *l != "```") {
            for token in line.split_whitespace() {
                if token.len() != 2 {
                    break;
                }
                match u8::from_str_radix(token, 16) {
                    Ok(b) => bytes.push(b),
                    Err(_) => break,
                }
            }
        }
        assert!(!bytes.is_empty(), "example {name} has no bytes");
        bytes
    }

    fn get_request() -> Request {
        Request {
            method: "GET".into(),
            uri: "/".into(),
            headers: vec![("host".into(), b"a".to_vec())],
            body: Vec::new(),
            context: Context {
                actor: "c1".into(),
                worker: "w".into(),
            },
        }
    }

    #[test]
    fn request_example_matches_the_encoder() {
        let bytes = example("request_get");
        assert_eq!(encode_request(&get_request()).unwrap(), bytes);
        assert_eq!(decode_request(&bytes).unwrap(), get_request());
    }

    #[test]
    fn response_examples_match_the_encoder() {
        let text = Response::text(200, "ok\n");
        assert_eq!(encode_response(&text).unwrap(), example("response_text"));
        let not_found = Response {
            status: 404,
            headers: Vec::new(),
            body: b"x".to_vec(),
        };
        let bytes = example("response_404");
        assert_eq!(encode_response(&not_found).unwrap(), bytes);
        assert_eq!(decode_response(&bytes).unwrap(), not_found);
    }

    /// The varint table and the shortest-form rule, through a body length.
    #[test]
    fn length_prefixes_follow_the_varint_table() {
        let cases: [(usize, &[u8]); 6] = [
            (0, &[0x00]),
            (250, &[0xfa]),
            (251, &[0xfb, 0xfb, 0x00]),
            (300, &[0xfb, 0x2c, 0x01]),
            (65_535, &[0xfb, 0xff, 0xff]),
            (70_000, &[0xfc, 0x70, 0x11, 0x01, 0x00]),
        ];
        for (len, prefix) in cases {
            let response = Response {
                status: 200,
                headers: Vec::new(),
                body: vec![7; len],
            };
            let bytes = encode_response(&response).unwrap();
            // status 200, zero headers, then the body's length prefix.
            assert_eq!(&bytes[..2], &[0xc8, 0x00], "len {len}");
            assert_eq!(&bytes[2..2 + prefix.len()], prefix, "len {len}");
            assert_eq!(bytes.len(), 2 + prefix.len() + len, "len {len}");
        }
    }

    /// What the decoder accepts beyond the shortest form, and what it refuses,
    /// as the "Building blocks" section says.
    #[test]
    fn decoder_accepts_long_forms_and_refuses_the_rest() {
        // Status 200 written as `fb c8 00`, body length 1 as `fc 01 00 00 00`.
        let long = [0xfb, 0xc8, 0x00, 0x00, 0xfc, 0x01, 0x00, 0x00, 0x00, 0x78];
        assert_eq!(
            decode_response(&long).unwrap(),
            Response {
                status: 200,
                headers: Vec::new(),
                body: b"x".to_vec(),
            }
        );
        // A status in the `fc` form does not fit a u16 field.
        let wide = [0xfc, 0xc8, 0x00, 0x00, 0x00, 0x00, 0x00];
        assert!(matches!(decode_response(&wide), Err(WireError::Decode(_))));
        // 0xff is no varint.
        assert!(matches!(
            decode_response(&[0xc8, 0xff]),
            Err(WireError::Decode(_))
        ));
        // A header name that is not UTF-8.
        let bad_name = [0xc8, 0x01, 0x01, 0xff, 0x00, 0x00];
        assert!(matches!(
            decode_response(&bad_name),
            Err(WireError::Decode(_))
        ));
    }

    /// A buffer that ends inside a field never decodes.
    #[test]
    fn every_truncation_is_refused() {
        let mut request = get_request();
        request.body = b"hello".to_vec();
        let bytes = encode_request(&request).unwrap();
        for cut in 0..bytes.len() {
            assert!(
                decode_request(&bytes[..cut]).is_err(),
                "a request cut at {cut} of {} bytes decoded",
                bytes.len()
            );
        }
    }

    #[test]
    fn the_budget_is_the_documented_limit() {
        assert_eq!(crate::MAX_MESSAGE_BYTES, 256 << 20);
    }
}
