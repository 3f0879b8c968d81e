//! Cluster mode (real etcd and s3s-fs) keeps snapshot chains in the
//! object store: a checkpoint of a big actor uploads the pages it changed,
//! not its whole memory, and another worker restores the chain after the
//! owner is lost (issue 29: bytes shipped to the store ≈ the delta).

use std::path::Path;

use crate::replicas::{ONE_CLUSTER, deployment, served};
use crate::support::{STASIS, client, count, to_actor};

/// Sizes of the snapshot objects of `actor` in the store at `bucket`, by
/// name (`<seq>-<epoch>.snap`, so oldest first).
fn snapshot_sizes(bucket: &Path, actor: &str) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    let mut stack = vec![bucket.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if path.parent().and_then(Path::file_name) == Some(actor.as_ref())
                && name.ends_with(".snap")
            {
                found.push((name, entry.metadata().map(|m| m.len()).unwrap_or(0)));
            }
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_in_cluster_mode_ships_a_delta_and_the_chain_restores_elsewhere() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 1, 2, &["--keep-snapshots", "2"]);
    let faulty = STASIS.demo("faulty");
    d.cli_json(
        0,
        &[
            "template",
            "push",
            "faulty",
            faulty.to_str().expect("utf-8"),
        ],
    );
    d.cli_json(0, &["actor", "create", "g1", "--template", "faulty"]);
    let c = client();
    let ingress = d.replica(0).ingress;
    // 4 MiB of touched memory: a full snapshot stores over 1,000 pages.
    let grown = to_actor(&c, ingress, "g1", "POST", "/grow?mib=4").await;
    assert_eq!(grown.status, 200, "{grown:?}");
    // A checkpoint after each request (the requests themselves go to the
    // shipped journal; a checkpoint writes the actor's chain).
    for expected in 1..=4 {
        assert_eq!(
            count(&to_actor(&c, ingress, "g1", "POST", "/").await),
            expected
        );
        d.cli_json(0, &["actor", "checkpoint", "g1"]);
    }
    let bucket = d.s3.as_ref().expect("s3").bucket_dir();
    let sizes = snapshot_sizes(&bucket, "g1");
    let full = sizes.iter().map(|(_, b)| *b).max().expect("snapshots");
    assert!(
        full > 4 << 20,
        "the full snapshot holds the 4 MiB: {sizes:?}"
    );
    // Retention keeps the 2 newest and the base their chain needs.
    assert!(sizes.len() >= 3, "{sizes:?}");
    let (newest, newest_bytes) = sizes.last().expect("newest");
    assert!(
        *newest_bytes < 64 << 10,
        "a one-counter checkpoint ships its delta, not the actor ({newest}: {newest_bytes} \
         bytes, full {full}): {sizes:?}"
    );
    // Lost with its disk: another worker restores the chain from the store.
    let owner = d.cli_json(0, &["actor", "get", "g1"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    d.kill_worker(&owner);
    // Its worker seen lost, or the actor already placed on another.
    crate::fencing::wait_for_actor(&d, "g1", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] != owner.as_str()
    });
    assert_eq!(served(&d, 0, "g1").await, 5);
    let info = d.cli_json(0, &["actor", "get", "g1"]);
    assert_ne!(info["worker"], owner.as_str(), "{info}");
}
