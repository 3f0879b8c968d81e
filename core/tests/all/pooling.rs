//! The pooling allocator (`--max-live`): exactly its slots, and restores
//! into freed slots.

use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::{ActorInstance, CallError};
use stasis_core::snapshot::{self, RestoreError};

use crate::support::*;

// ---------------------------------------------------------------------------
// 8. The pooling allocator (`--max-live`)
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_engine_holds_exactly_its_slots_and_restores_into_them() {
    let engine = StasisEngine::pooled(Limits::default(), 2).expect("pooled engine");
    assert_eq!(engine.slots(), Some(2));
    let wasm = small_guest(None);
    let template = load(&engine, &wasm);
    let mut first = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .expect("slot 1");
    call_ok(&mut first).await;
    let (bytes, _) = snapshot::capture(&mut first).unwrap();
    let _second = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .expect("slot 2");
    let refused = ActorInstance::spawn(&engine, template.clone(), config()).await;
    let error = match refused {
        Ok(_) => panic!("a third instance fit in two slots"),
        Err(e) => e,
    };
    assert!(matches!(error, CallError::Capacity(_)), "{error}");
    assert!(error.to_string().contains("--max-live"), "{error}");
    // A restore needs a slot too, and is refused the same way, not as a
    // broken snapshot.
    let verified = snapshot::verify(&bytes, &template, Limits::default().max_memory).unwrap();
    match snapshot::restore(&engine, template.clone(), config(), &verified).await {
        Err(RestoreError::Call(e)) => assert!(matches!(e, CallError::Capacity(_)), "{e}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a restore fit in two slots"),
    }
    // A freed slot is reused, zeroed, and the restore is exact.
    drop(first);
    let mut restored = snapshot::restore(&engine, template, config(), &verified)
        .await
        .expect("restore into the freed slot");
    let (again, _) = snapshot::capture(&mut restored).unwrap();
    assert_eq!(
        snapshot::verify_header(&again).unwrap().memories,
        snapshot::verify_header(&bytes).unwrap().memories
    );
    assert!(StasisEngine::pooled(Limits::default(), 0).is_err());
}
