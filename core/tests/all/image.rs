//! Snapshots on the module's initial image (format version 3): a memory
//! that is mostly its data segments' image (as a JavaScript template's
//! evaluated heap is) snapshots to what changed, in 64-byte blocks,
//! restores exactly (copied and copy-on-write from a file), flattens to a
//! version-1 file with the same state, carries deltas, and a file whose
//! patches do not fit is refused.

use stasis_core::instance::ActorInstance;
use stasis_core::snapshot::{
    self, Header, IMAGE_FORMAT_VERSION, PAGE_SIZE, SnapshotError, VerifiedChain,
};

use crate::support::*;

/// Pages of the image: 96 pages (384 KiB) of non-zero data segments.
const IMAGE_PAGES: u32 = 96;

/// A guest whose memory starts as [`IMAGE_PAGES`] pages of data segments
/// (from 64 KiB on); each call adds 1 to a byte in every 8th of those
/// pages and to one word in a fresh page past them.
fn heap_guest() -> Vec<u8> {
    let mut fields = String::from(
        r#"(@custom "stasis-abi" "\01\00\00\00")
  (memory 8)
  (data (i32.const 16) "\c8\00\00")"#,
    );
    for page in 0..IMAGE_PAGES {
        let at = 65536 + page * PAGE_SIZE as u32;
        let fill: String = (0..64)
            .map(|i| format!("\\{:02x}", (page + i) % 250 + 1))
            .collect();
        // 64 bytes of data every 256 bytes: every page is non-zero all over.
        for slot in 0..16 {
            fields.push_str(&format!(
                "\n  (data (i32.const {}) \"{fill}\")",
                at + slot * 256
            ));
        }
    }
    let handler = format!(
        r#"(local $p i32)
    (local.set $p (i32.const 0))
    (loop $l
      (i32.store8 (i32.add (i32.const 65636) (i32.mul (local.get $p) (i32.const {PAGE_SIZE})))
        (i32.add (i32.load8_u (i32.add (i32.const 65636)
          (i32.mul (local.get $p) (i32.const {PAGE_SIZE})))) (i32.const 1)))
      (local.set $p (i32.add (local.get $p) (i32.const 8)))
      (br_if $l (i32.lt_u (local.get $p) (i32.const {IMAGE_PAGES}))))
    (i32.store (i32.const 480000) (i32.add (i32.load (i32.const 480000)) (i32.const 1)))"#
    );
    guest(&fields, &handler)
}

fn memory(inst: &ActorInstance) -> Vec<u8> {
    inst.memory_data(0).expect("memory 0").to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mostly_image_memory_snapshots_to_its_changes_and_restores_exactly() {
    let wasm = heap_guest();
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let image = template
        .info
        .image
        .clone()
        .expect("constant offsets: an image");
    assert_eq!(image.non_zero_pages(), IMAGE_PAGES as usize + 1);
    let mut inst = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();

    // Fresh: the memory is the image; the snapshot stores nothing.
    let (fresh, stats) = snapshot::capture(&mut inst).unwrap();
    assert_eq!(stats.stored_pages, 0);
    assert!(
        fresh.len() <= 2 * PAGE_SIZE,
        "fresh snapshot of {} bytes",
        fresh.len()
    );
    let header = snapshot::verify_header(&fresh).unwrap();
    assert_eq!(header.version(), IMAGE_FORMAT_VERSION);
    assert!(header.memories[0].patches.is_empty() && header.memories[0].zero_runs.is_empty());

    for _ in 0..3 {
        call_ok(&mut inst).await;
    }
    let before = memory(&inst);
    let (bytes, stats) = snapshot::capture(&mut inst).unwrap();
    let header = snapshot::verify_header(&bytes).unwrap();
    // One fresh page stored whole; 12 image pages patched by one block
    // each, and page 0 (the request written at 1024) by a few.
    assert_eq!(stats.stored_pages, 1);
    let patches = &header.memories[0].patches;
    assert_eq!(patches.len(), IMAGE_PAGES as usize / 8 + 1);
    assert_eq!(patches[0].page, 0);
    assert!(patches[1..].iter().all(|p| p.blocks.count_ones() == 1));
    let image_bytes = IMAGE_PAGES as usize * PAGE_SIZE;
    assert!(
        bytes.len() * 20 < image_bytes,
        "snapshot of {} bytes for {image_bytes} bytes of image",
        bytes.len()
    );

    // Copied.
    let (_e, restored) = restore_fresh(&wasm, &bytes, config()).await;
    assert!(memory(&restored) == before, "restored by copying");
    // From a file (runs mapped copy-on-write where large enough).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.snap");
    std::fs::write(&path, &bytes).unwrap();
    let file =
        stasis_core::snapshot_store::SnapshotBytes::map_file(std::fs::File::open(&path).unwrap())
            .unwrap();
    let verified = snapshot::verify(file, &template, engine.limits().max_memory).unwrap();
    let mut from_file = snapshot::restore(&engine, template.clone(), config(), &verified)
        .await
        .unwrap();
    assert!(memory(&from_file) == before, "restored from a file");
    // The restored instance goes on as the original does.
    call_ok(&mut from_file).await;
    call_ok(&mut inst).await;
    assert!(
        memory(&from_file) == memory(&inst),
        "calls after the restore"
    );

    // Flattened: a version-1 file that restores the same memory.
    let verified = snapshot::verify(&bytes[..], &template, engine.limits().max_memory).unwrap();
    let chain = VerifiedChain::new(vec![(1, verified)]).unwrap();
    let flat = snapshot::flatten(&chain).unwrap();
    let flat_header = snapshot::verify_header(&flat).unwrap();
    assert!(flat_header.on_image.is_none());
    assert_eq!(flat_header.stored_pages(), IMAGE_PAGES as u64 + 2);
    let (_e, restored) = restore_fresh(&wasm, &flat, config()).await;
    assert!(
        memory(&restored) == before,
        "restored from the flattened file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_that_do_not_fit_are_refused() {
    let wasm = heap_guest();
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut inst = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut inst).await;
    let (bytes, _) = snapshot::capture(&mut inst).unwrap();
    let max = engine.limits().max_memory;
    let verify = |b: &[u8]| snapshot::verify(b, &template, max).map(|v| v.into_header());
    let header = verify(&bytes).expect("the intact snapshot verifies");
    assert!(header.memories[0].patches.len() >= 2);
    let bad: [fn(&mut Header); 6] = [
        |h| h.memories[0].patches[0].blocks = 0,
        |h| h.memories[0].patches[0].file_offset = 1 << 40,
        |h| h.memories[0].patches[0].file_offset = 8,
        |h| h.memories[0].patches[1].page = h.memories[0].patches[0].page,
        |h| h.memories[0].patches[0].page = 1 << 20,
        |h| h.memories[0].patches[0].page = h.memories[0].runs[0].first_page,
    ];
    for (i, change) in bad.iter().enumerate() {
        let mut h = header.clone();
        change(&mut h);
        let b = rewrite_header(&bytes, &h);
        assert!(
            matches!(verify(&b), Err(SnapshotError::Layout(_))),
            "patch change {i}: {:?}",
            verify(&b)
        );
    }
    // Recorded on another image (a build that computed it otherwise): not
    // damaged, not restorable onto this one either.
    let mut h = header.clone();
    h.on_image = h.on_image.map(|crc| crc ^ 1);
    assert!(
        matches!(
            verify(&rewrite_header(&bytes, &h)),
            Err(SnapshotError::ImageDiffers { .. })
        ),
        "another image"
    );
    // A template without the image (another module) does not take it.
    let other = load(&engine, &guest(BASE, "(nop)"));
    assert!(snapshot::verify(&bytes[..], &other, max).is_err());
}
