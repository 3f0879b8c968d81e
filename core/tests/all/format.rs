//! The snapshot file format and its verification: corrupt files are
//! refused with the check that failed, sizes past the module's maximum are
//! too large, and `same_state` compares states, not clocks.

use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::ActorInstance;
use stasis_core::snapshot::{
    self, FORMAT_VERSION, FULL_FORMAT_VERSION, Header, MAGIC, PAGE_SIZE, RestoreError,
    SnapshotError,
};

use crate::support::*;

// ---------------------------------------------------------------------------
// 6. Corrupt snapshot files are refused with the right error
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_snapshots_are_refused() {
    let wasm = small_guest(None);
    let (engine, template, bytes) = small_snapshot(&wasm).await;
    let max = engine.limits().max_memory;
    let verify = |b: &[u8]| snapshot::verify(b, &template, max).map(|v| v.into_header());
    let header = verify(&bytes).expect("the intact snapshot verifies");
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..8], &MAGIC);
    assert_eq!(
        u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
        FULL_FORMAT_VERSION
    );
    assert_eq!(
        u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
        bytes.len() as u64
    );
    // Layout: prefix + header, padding, pages 0 and 2 at 4096 and 8192, CRC.
    assert_eq!(bytes.len(), 3 * PAGE_SIZE + 4);
    assert_eq!(header.memories[0].runs.len(), 2);

    // Zero length and truncations.
    assert_eq!(
        verify(&[]),
        Err(SnapshotError::Truncated { len: 0, min: 28 })
    );
    for cut in [1, 8, 12, 23, 27] {
        assert_eq!(
            verify(&bytes[..cut]),
            Err(SnapshotError::Truncated {
                len: cut as u64,
                min: 28
            }),
            "cut at {cut}"
        );
    }
    for cut in [
        28,
        24 + header_len,
        PAGE_SIZE,
        PAGE_SIZE + 1,
        bytes.len() - 4,
        bytes.len() - 1,
    ] {
        assert_eq!(
            verify(&bytes[..cut]),
            Err(SnapshotError::LengthMismatch {
                recorded: bytes.len() as u64,
                actual: cut as u64
            }),
            "cut at {cut}"
        );
    }
    let mut extended = bytes.clone();
    extended.push(0);
    assert!(matches!(
        verify(&extended),
        Err(SnapshotError::LengthMismatch { .. })
    ));

    // Flipped bytes.
    let flip = |at: usize| {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        verify(&b)
    };
    assert_eq!(flip(0), Err(SnapshotError::BadMagic));
    assert!(matches!(
        flip(8),
        Err(SnapshotError::UnsupportedVersion { found: 0x41 })
    ));
    assert!(matches!(
        flip(16),
        Err(SnapshotError::LengthMismatch { .. })
    ));
    for at in [
        12,
        24,
        24 + header_len - 1,
        24 + header_len,
        PAGE_SIZE - 1,
        PAGE_SIZE + 16,
        2 * PAGE_SIZE,
        bytes.len() - 5,
        bytes.len() - 1,
    ] {
        assert!(
            matches!(flip(at), Err(SnapshotError::ChecksumMismatch { .. })),
            "flip at {at}: {:?}",
            flip(at)
        );
    }
    // Every single-byte change anywhere is refused (CRC32C catches every
    // burst of up to 32 bits), without a panic.
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] = !b[at];
        assert!(
            verify(&b).is_err(),
            "byte {at} changed and the file verified"
        );
    }

    // Versions: newer (and zero) are refused by name even with a valid CRC.
    for version in [0u32, FORMAT_VERSION + 1, u32::MAX] {
        let mut b = bytes.clone();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        reseal(&mut b);
        let err = verify(&b).unwrap_err();
        assert_eq!(err, SnapshotError::UnsupportedVersion { found: version });
        assert!(
            err.to_string().contains(&format!("version {version}")),
            "{err}"
        );
    }

    // A full snapshot's header labelled as a delta's version does not
    // decode as one (it has no base and no zero runs).
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::BadHeader(_))),
        "{:?}",
        verify(&b)
    );

    // Length bomb (a): the header length claims 4 GiB.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::TooLarge(_))),
        "{:?}",
        verify(&b)
    );
    // A header length past the end of this (small) file.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::TooLarge(_))),
        "{:?}",
        verify(&b)
    );
    // A header length one byte short: the header no longer decodes.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&(header_len as u32 - 1).to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::BadHeader(_))),
        "{:?}",
        verify(&b)
    );
    // One byte too long: bytes are left after the header.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&(header_len as u32 + 1).to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::BadHeader(_))),
        "{:?}",
        verify(&b)
    );

    // Re-encoding the header unchanged gives the same file (the helper is sound).
    assert_eq!(rewrite_header(&bytes, &header), bytes);

    // Length bomb (b): the memory claims 2^40 wasm pages (and u64::MAX).
    for pages in [1u64 << 40, u64::MAX, 4097] {
        let mut h = header.clone();
        h.memories[0].wasm_pages = pages;
        let b = rewrite_header(&bytes, &h);
        assert!(
            matches!(verify(&b), Err(SnapshotError::TooLarge(_))),
            "{pages}: {:?}",
            verify(&b)
        );
        // The module-independent check alone accepts it (it is well-formed).
        assert_eq!(
            snapshot::verify_header(&b).unwrap().memories[0].wasm_pages,
            pages
        );
    }

    // Layout: a page run past the file, past the memory, overlapping, empty.
    let layouts: [fn(&mut Header); 5] = [
        |h| h.memories[0].runs[1].file_offset = 1 << 40,
        |h| h.memories[0].runs[1].first_page = 16,
        |h| h.memories[0].runs[1].first_page = 0,
        |h| h.memories[0].runs[0].pages = 0,
        |h| h.memories[0].runs[0].file_offset = 100,
    ];
    for (i, patch) in layouts.iter().enumerate() {
        let mut h = header.clone();
        patch(&mut h);
        let b = rewrite_header(&bytes, &h);
        assert!(
            matches!(verify(&b), Err(SnapshotError::Layout(_))),
            "layout {i}: {:?}",
            verify(&b)
        );
    }
    // Globals that do not match the module, and a memory below its minimum.
    let mut h = header.clone();
    h.globals[0].index = 7;
    let b = rewrite_header(&bytes, &h);
    assert!(
        matches!(verify(&b), Err(SnapshotError::Layout(_))),
        "{:?}",
        verify(&b)
    );
    let mut h = header.clone();
    h.memories[0].wasm_pages = 0;
    let b = rewrite_header(&bytes, &h);
    assert!(
        matches!(verify(&b), Err(SnapshotError::Layout(_))),
        "{:?}",
        verify(&b)
    );

    // Wrong module: A's snapshot against template B.
    let other = guest(BASE, "(nop)");
    let template_b = load(&engine, &other);
    let err = snapshot::verify(&bytes, &template_b, max).unwrap_err();
    assert!(matches!(err, SnapshotError::WrongModule { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_past_the_declared_maximum_is_too_large() {
    let wasm = small_guest(Some(4));
    let (engine, template, bytes) = small_snapshot(&wasm).await;
    let max = engine.limits().max_memory;
    let header = snapshot::verify(&bytes, &template, max)
        .unwrap()
        .into_header();
    let mut h = header.clone();
    h.memories[0].wasm_pages = 4;
    assert!(snapshot::verify(&rewrite_header(&bytes, &h), &template, max).is_ok());
    h.memories[0].wasm_pages = 5;
    let err = snapshot::verify(&rewrite_header(&bytes, &h), &template, max).unwrap_err();
    assert!(matches!(err, SnapshotError::TooLarge(_)), "{err:?}");
    // The error names the limit broken: the module's maximum, in pages and
    // bytes, not the engine's --max-memory (which is far larger here).
    let text = err.to_string();
    assert!(
        text.contains("declares at most 4 pages (262144 bytes)"),
        "{text}"
    );
    assert!(!text.contains("max-memory"), "{text}");
    // Past the engine's limit but within the module's: names --max-memory.
    h.memories[0].wasm_pages = 3;
    let text = snapshot::verify(&rewrite_header(&bytes, &h), &template, 2 * 65536)
        .unwrap_err()
        .to_string();
    assert!(text.contains("--max-memory is 131072 bytes"), "{text}");
    // A restore that cannot grow (the memory may hold 4 pages, the snapshot
    // is verified with a generous limit, the engine allows less) fails cleanly.
    let small = StasisEngine::new(Limits {
        max_memory: 2 * 65536,
        ..Limits::default()
    })
    .unwrap();
    let small_template = load(&small, &wasm);
    h.memories[0].wasm_pages = 3;
    let b = rewrite_header(&bytes, &h);
    let verified = snapshot::verify(&b, &small_template, 4 * 65536).unwrap();
    let result = snapshot::restore(&small, small_template, config(), &verified).await;
    match result {
        Err(RestoreError::Snapshot(e @ SnapshotError::TooLarge(_))) => {
            assert!(
                e.to_string().contains("--max-memory is 131072 bytes"),
                "{e}"
            );
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("restored past --max-memory"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_verified_for_one_template_is_not_restored_into_another() {
    let wasm = small_guest(None);
    let (engine, template, bytes) = small_snapshot(&wasm).await;
    let verified = snapshot::verify(&bytes, &template, engine.limits().max_memory).unwrap();
    let other = load(&engine, &small_guest(Some(4)));
    match snapshot::restore(&engine, other, config(), &verified).await {
        Err(RestoreError::Snapshot(SnapshotError::WrongModule { .. })) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("restored into another template"),
    }
    snapshot::restore(&engine, template, config(), &verified)
        .await
        .expect("its own template restores it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_state_ignores_the_clock_and_nothing_else() {
    let wasm = small_guest(None);
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut inst = ActorInstance::spawn(&engine, template, config())
        .await
        .unwrap();
    let (before, _) = snapshot::capture(&mut inst).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (again, _) = snapshot::capture(&mut inst).unwrap();
    assert_ne!(
        snapshot::verify_header(&before).unwrap().clock_ns,
        snapshot::verify_header(&again).unwrap().clock_ns
    );
    assert!(
        snapshot::same_state(&before, &again),
        "only the clock moved"
    );
    // The call sets two globals and writes one word of memory.
    call_ok(&mut inst).await;
    let (after, _) = snapshot::capture(&mut inst).unwrap();
    assert!(!snapshot::same_state(&before, &after));
    // One flipped page byte (with a recomputed checksum) is a different
    // state; a torn file is never the same.
    let mut flipped = after.clone();
    let at = flipped.len() - 5;
    flipped[at] ^= 1;
    let body = flipped.len() - 4;
    let crc = crc32c::crc32c(&flipped[..body]);
    flipped[body..].copy_from_slice(&crc.to_le_bytes());
    assert!(snapshot::verify_header(&flipped).is_ok());
    assert!(!snapshot::same_state(&after, &flipped));
    assert!(!snapshot::same_state(&after, &after[..after.len() - 1]));
}
