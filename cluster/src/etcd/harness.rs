//! The harness of the etcd tests: a real 3-member cluster per test (the
//! test util's `EtcdCluster`), one test at a time, each bounded in time, and a
//! connection to it under a key prefix.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use stasis_test_util::etcd::EtcdCluster;
use tokio::time::timeout;

use super::{Etcd, EtcdOptions};

/// One etcd test at a time: three members per test on two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// Starts a 3-member cluster and runs `body` on a multi-thread runtime,
/// failing if it takes longer than `limit`.
pub(super) fn etcd_test<F, Fut>(limit: Duration, body: F)
where
    F: FnOnce(EtcdCluster) -> Fut,
    Fut: Future<Output = ()>,
{
    etcd_test_with(&[], limit, body);
}

/// [`etcd_test`] on members started with `flags` too.
pub(super) fn etcd_test_with<F: FnOnce(EtcdCluster) -> Fut, Fut: Future<Output = ()>>(
    flags: &[&str],
    limit: Duration,
    body: F,
) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cluster = EtcdCluster::start_with_flags(3, flags);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("test runtime");
    rt.block_on(async {
        timeout(limit, body(cluster))
            .await
            .unwrap_or_else(|_| panic!("the test took longer than {limit:?}"));
    });
}

pub(super) async fn connect(cluster: &EtcdCluster, prefix: &str) -> Etcd {
    let opts = EtcdOptions::parse(&cluster.url(prefix)).expect("url");
    Etcd::connect(&opts).await.expect("connect to etcd")
}
