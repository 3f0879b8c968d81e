//! Acknowledgements that tell the truth (reliability round 3, input 2)
//! through the real binary: a cluster worker reaches the S3 server
//! (`s3s-fs`) through a fault proxy on loopback that loses the answer to
//! `CompleteMultipartUpload` after the server applied it. The checkpoint
//! is acknowledged (the store read the object back), not "undone", and
//! the actor comes back with it on another worker.

use stasis_test_util::fault_proxy::{Fault, FaultProxy};

use crate::fencing::wait_for_actor;
use crate::replicas::{ONE_CLUSTER, deployment, served};
use crate::replicas_faults::start_worker;
use crate::support::{STASIS, client, count, to_actor};

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_whose_complete_multipart_answer_was_lost_is_acknowledged() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 1, 0, &[]);
    let s3 = d.s3.as_ref().expect("s3");
    let proxy = FaultProxy::start(s3.addr());
    let endpoint = proxy.endpoint();
    let (w1, _w1_dir) =
        start_worker(&d, "w1", &[("AWS_ENDPOINT_URL", endpoint.as_str())]).expect("w1 starts");
    d.wait_for_workers(1);
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
    d.cli_json(0, &["actor", "create", "m1", "--template", "faulty"]);
    let c = client();
    let ingress = d.replica(0).ingress;
    assert_eq!(count(&to_actor(&c, ingress, "m1", "POST", "/").await), 1);
    // 12 MiB more: its checkpoint is a multipart upload (over 8 MiB), and
    // the answer to its completion is lost once. (The request itself is a
    // journal entry of a few hundred bytes; the checkpoint writes the
    // actor's memory.)
    let grown = to_actor(&c, ingress, "m1", "POST", "/grow?mib=12").await;
    assert_eq!(grown.status, 200, "{grown:?}\n{}", w1.log());
    proxy.on("POST", "uploadId=", Fault::LoseAnswer, 1);
    let checkpoint = d.cli_json(0, &["actor", "checkpoint", "m1"]);
    assert_eq!(checkpoint["snapshot"]["seq"], 1, "{checkpoint}");
    assert_eq!(
        proxy.fired().len(),
        1,
        "the answer was lost: {:?}",
        proxy.fired()
    );
    // The store holds it: another worker restores the actor with it.
    let (_w2, _w2_dir) = start_worker(&d, "w2", &[]).expect("w2 starts");
    d.wait_for_workers(2);
    drop(w1);
    // Its worker seen lost, or the actor already placed on w2 (lazily:
    // the loss places it there at once).
    wait_for_actor(&d, "m1", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] == "w2"
    });
    assert_eq!(served(&d, 0, "m1").await, 2);
    let kept = to_actor(&c, ingress, "m1", "POST", "/grow?mib=0").await;
    assert_eq!(kept.status, 200, "{kept:?}");
    assert!(
        kept.body.contains(&format!("kept {} bytes", 12 << 20)),
        "{kept:?}"
    );
}
