//! The actors' watch against a real etcd: a listing first, then each
//! event as the records it put and deleted, never the whole map again.

use std::time::Duration;

use stasis_contract::directory::{ActorsChange, Directory};

use super::tests::{actor, connect, etcd_test};

#[test]
fn the_actors_watch_hands_over_each_event_as_its_changes() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let etcd = connect(&cluster, "/wa").await;
        let dir = etcd.directory();
        for name in ["a", "b", "c"] {
            dir.insert_actor(&actor(name, "w1")).expect("insert");
        }
        let mut changes = etcd.watch_actors().await.expect("watch");
        let Some(ActorsChange::Listed(at)) = changes.recv().await else {
            panic!("the watch did not start with a listing");
        };
        let names: Vec<&String> = at.actors.keys().collect();
        assert_eq!(names, ["a", "b", "c"]);
        let listed_at = at.revision;
        assert!(listed_at > 0);

        dir.insert_actor(&actor("d", "w2")).expect("insert");
        let Some(ActorsChange::Changed {
            put,
            deleted,
            revision,
        }) = changes.recv().await
        else {
            panic!("no change after an insert");
        };
        assert_eq!(put.len(), 1, "{put:?}");
        assert_eq!(put[0].0, actor("d", "w2"));
        assert!(
            put[0].1 > listed_at,
            "the generation is the create revision"
        );
        assert!(deleted.is_empty());
        assert!(revision > listed_at);

        dir.delete_actor("b").expect("delete");
        let Some(ActorsChange::Changed {
            put,
            deleted,
            revision: after,
        }) = changes.recv().await
        else {
            panic!("no change after a delete");
        };
        assert!(put.is_empty(), "{put:?}");
        assert_eq!(deleted, ["b"]);
        assert!(after > revision);
    });
}
