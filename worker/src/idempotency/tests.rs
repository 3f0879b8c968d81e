//! The idempotency table on its own: recall, remember, bounds, encoding.

use super::*;
use stasis_contract::error::ErrorKind;

const HOUR_MS: u64 = 60 * 60 * 1000;

fn request(key: &str, body: &str) -> Request {
    let mut request = Request::new("POST", "/").with_body(body.as_bytes().to_vec());
    request
        .headers
        .push(("idempotency-key".to_owned(), key.as_bytes().to_vec()));
    request
}

/// Runs `request` against `table` as the actor task does: the answer
/// given, and whether the guest ran.
fn deliver(
    table: &mut IdempotencyTable,
    request: &Request,
    now: u64,
) -> (Result<Response, ApiError>, bool) {
    match table.recall("a", request, now) {
        Recall::Run(keyed) => {
            let answer = Response::text(200, format!("applied {}", request.body.len()));
            if let Some(keyed) = keyed {
                table.remember(keyed, &answer, now);
            }
            (Ok(answer), true)
        }
        Recall::Answer(answer) => (answer, false),
    }
}

#[test]
fn a_retry_gets_the_first_answer_and_is_not_applied_again() {
    let mut table = IdempotencyTable::default();
    let (first, ran) = deliver(&mut table, &request("k1", "x"), 1);
    assert!(ran && table.changed);
    let (again, ran) = deliver(&mut table, &request("k1", "x"), 2);
    assert!(!ran);
    let again = again.expect("the first answer");
    let first = first.expect("applied");
    assert_eq!((again.status, &again.body), (first.status, &first.body));
    assert!(
        again
            .headers
            .contains(&("idempotent-replayed".into(), b"true".to_vec()))
    );
    // Another body under the same key: 422, not applied.
    let (other, ran) = deliver(&mut table, &request("k1", "y"), 3);
    assert!(!ran);
    assert_eq!(other.expect_err("422").kind(), ErrorKind::Unprocessable);
    // No key: always applied.
    let mut plain = Request::new("POST", "/");
    plain.body = b"x".to_vec();
    assert!(deliver(&mut table, &plain, 4).1);
    assert!(deliver(&mut table, &plain, 5).1);
}

#[test]
fn a_bad_key_is_refused_naming_the_limit() {
    let mut table = IdempotencyTable::default();
    let long = "k".repeat(256);
    let (answer, ran) = deliver(&mut table, &request(&long, "x"), 1);
    assert!(!ran);
    let e = answer.expect_err("400");
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    assert!(e.message().contains("255"), "{}", e.message());
    assert!(table.is_empty());
}

#[test]
fn keys_expire_after_the_window_and_past_the_count() {
    let mut table = IdempotencyTable::default();
    let _ = deliver(&mut table, &request("old", "x"), 0);
    let _ = deliver(&mut table, &request("new", "x"), 23 * HOUR_MS);
    // 24 h after `old`: still there; past it, applied anew.
    assert!(!deliver(&mut table, &request("old", "x"), 24 * HOUR_MS).1);
    assert!(deliver(&mut table, &request("old", "x"), 24 * HOUR_MS + 1).1);
    assert!(!deliver(&mut table, &request("new", "x"), 24 * HOUR_MS + 1).1);
    let mut table = IdempotencyTable::default();
    for n in 0..=MAX_KEYS {
        let _ = deliver(&mut table, &request(&format!("k{n}"), "x"), 1);
    }
    assert_eq!(table.len(), MAX_KEYS);
    assert!(
        deliver(&mut table, &request("k0", "x"), 1).1,
        "the oldest went"
    );
    assert!(!deliver(&mut table, &request(&format!("k{MAX_KEYS}"), "x"), 1).1);
}

#[test]
fn a_large_answer_is_kept_by_status_only_and_a_retry_is_409() {
    let mut table = IdempotencyTable::default();
    let big = Response::text(201, "b".repeat(MAX_KEPT_BODY + 1));
    let Recall::Run(Some(keyed)) = table.recall("a", &request("big", "x"), 1) else {
        panic!("runs");
    };
    table.remember(keyed, &big, 1);
    let Recall::Answer(Err(e)) = table.recall("a", &request("big", "x"), 2) else {
        panic!("not applied again");
    };
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(
        e.message().contains("201") && e.message().contains("applied already"),
        "{}",
        e.message()
    );
    // Kept bodies past the total: the oldest go, their keys stay.
    let mut table = IdempotencyTable::default();
    let answer = Response::text(200, "b".repeat(MAX_KEPT_BODY));
    for n in 0..20 {
        let Recall::Run(Some(keyed)) = table.recall("a", &request(&format!("k{n}"), "x"), 1) else {
            panic!("runs");
        };
        table.remember(keyed, &answer, 1);
    }
    assert!(table.kept_bytes <= MAX_KEPT_BYTES);
    assert!(matches!(
        table.recall("a", &request("k0", "x"), 1),
        Recall::Answer(Err(_))
    ));
    assert!(matches!(
        table.recall("a", &request("k19", "x"), 1),
        Recall::Answer(Ok(_))
    ));
}

#[test]
fn the_table_reads_back_from_its_bytes_and_a_restore_adds_the_replayed_keys() {
    let mut table = IdempotencyTable::default();
    assert!(table.encode().is_empty());
    let _ = deliver(&mut table, &request("a", "1"), 10);
    let _ = deliver(&mut table, &request("b", "2"), 20);
    let big = Response::text(200, "b".repeat(MAX_KEPT_BODY + 1));
    if let Recall::Run(Some(keyed)) = table.recall("a", &request("c", "3"), 30) {
        table.remember(keyed, &big, 30);
    }
    let bytes = table.encode();
    let back = IdempotencyTable::decode(&bytes).expect("decodes");
    assert_eq!(back.order, table.order);
    assert_eq!(back.entries, table.entries);
    assert_eq!(back.kept_bytes, table.kept_bytes);
    assert!(IdempotencyTable::decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(IdempotencyTable::decode(&[9]).is_err());
    // A restore: the snapshot's table, then a replayed key; the key the
    // table held keeps its time.
    let mut live = table;
    let replayed = Keyed::of(&request("d", "4")).expect("keyed");
    if let Recall::Run(Some(keyed)) = live.recall("a", &request("d", "4"), 40) {
        live.remember(keyed, &Response::text(200, "d"), 40);
    }
    live.restored(&bytes, vec![(replayed, Response::text(200, "d"))], 99);
    assert_eq!(live.len(), 4);
    assert_eq!(live.entries["d"].at_ms, 40);
    assert!(live.changed);
    assert!(!deliver(&mut live, &request("d", "4"), 100).1);
}
