//! The actors' watch of changes against a real etcd: no listing, each
//! event as the records it put and deleted with their revisions, and the
//! one-key read a placement cache makes on a miss.

use std::time::Duration;

use stasis_contract::directory::{ActorsChange, Directory};

use super::tests::{actor, connect, etcd_test};

#[test]
fn the_actors_watch_hands_over_each_event_as_its_changes_without_a_listing() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let etcd = connect(&cluster, "/wa").await;
        let dir = etcd.directory();
        for name in ["a", "b", "c"] {
            dir.insert_actor(&actor(name, "w1")).expect("insert");
        }
        let mut changes = etcd.watch_actor_changes().await.expect("watch");
        let Some(ActorsChange::Watching { revision: started }) = changes.recv().await else {
            panic!("the watch did not start by saying where");
        };
        assert!(started > 0);

        dir.insert_actor(&actor("d", "w2")).expect("insert");
        let Some(ActorsChange::Changed {
            put,
            deleted,
            revision,
        }) = changes.recv().await
        else {
            panic!("no change after an insert (or the existing actors were listed)");
        };
        assert_eq!(put.len(), 1, "{put:?}");
        assert_eq!(put[0].row, actor("d", "w2"));
        assert!(
            put[0].generation > started,
            "the generation is the create revision"
        );
        assert_eq!(put[0].revision, revision);
        assert!(deleted.is_empty());
        assert!(revision > started);
        let d_generation = put[0].generation;

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
        assert_eq!(deleted, [("b".to_owned(), after)]);
        assert!(after > revision);

        // The one-key read: the record, its generation, the revision read at.
        let read = dir.actor("d", after).expect("read");
        assert_eq!(read.row, Some(actor("d", "w2")));
        assert_eq!(read.generation, d_generation);
        assert!(read.revision >= after);
        let gone = dir.actor("b", after).expect("read");
        assert_eq!(gone.row, None);
        assert!(gone.revision >= after);
    });
}
