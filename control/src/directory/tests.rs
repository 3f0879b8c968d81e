//! Tests of the embedded directory: group commit, migrations, labels.

use super::*;

/// A new directory in `tmp` holding one template, `t`.
fn with_template_t(tmp: &tempfile::TempDir) -> SqliteDirectory {
    let dir = SqliteDirectory::open(&tmp.path().join("stasis.db")).expect("open");
    dir.insert_template(&TemplateRow {
        name: "t".into(),
        digest: "00".into(),
        bytes: 0,
        env: Vec::new(),
        durability: None,
    })
    .expect("template");
    dir
}

#[test]
fn concurrent_inserts_are_committed_together_and_refused_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = with_template_t(&tmp);
    let row = |name: String, template: &str| ActorRow {
        name,
        template: template.into(),
        worker: "w1".into(),
        epoch: 1,
        created_at_unix_ms: None,
        labels: Default::default(),
    };
    // 8 threads × 50 inserts; every 10th of one thread names no
    // template (refused by the foreign key), and one name is taken twice.
    let refused = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let dir = &dir;
                scope.spawn(move || {
                    (0..50)
                        .filter(|i| {
                            let template = if t == 0 && i % 10 == 0 { "none" } else { "t" };
                            let name = if t == 1 && *i == 49 {
                                "a-0-1".to_owned()
                            } else {
                                format!("a-{t}-{i}")
                            };
                            dir.insert_actor(&row(name, template)).is_err()
                        })
                        .count()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .sum::<usize>()
    });
    assert_eq!(refused, 5 + 1);
    assert_eq!(dir.actors().expect("actors").len(), 8 * 50 - 6);
    let inserts = dir.inserts.lock().expect("inserts");
    assert!(inserts.queued.is_empty() && inserts.done.is_empty());
    assert!(!inserts.committing);
}

#[test]
fn a_placement_switch_takes_each_epoch_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = with_template_t(&tmp);
    dir.insert_actor(&ActorRow {
        name: "a".into(),
        template: "t".into(),
        worker: "w1".into(),
        epoch: 1,
        created_at_unix_ms: None,
        labels: Default::default(),
    })
    .expect("insert");
    dir.place_actor("a", "w2", 2)
        .expect("first decision at epoch 2");
    let second = dir.place_actor("a", "w3", 2).expect_err("epoch 2 is taken");
    assert_eq!(second.kind().status(), 409);
    let stale = dir.place_actor("a", "w3", 1).expect_err("epoch 1 is older");
    assert_eq!(stale.kind().status(), 409);
    assert_eq!(
        dir.place_actor("gone", "w1", 5)
            .expect_err("no such actor")
            .kind()
            .status(),
        409
    );
    let rows = dir.actors().expect("actors");
    assert_eq!((rows[0].worker.as_str(), rows[0].epoch), ("w2", 2));
}

#[test]
fn one_alarm_per_actor_kept_across_reopen_and_deleted_with_the_actor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("stasis.db");
    // A data dir from before alarms (schema version 0) opens and
    // migrates.
    {
        let conn = Connection::open(&path).expect("old db");
        conn.execute_batch(
            "CREATE TABLE templates (name TEXT PRIMARY KEY, digest TEXT NOT NULL,
                 bytes INTEGER NOT NULL, env TEXT NOT NULL);
             CREATE TABLE actors (name TEXT PRIMARY KEY, template TEXT NOT NULL
                 REFERENCES templates(name), worker TEXT NOT NULL, epoch INTEGER NOT NULL);
             INSERT INTO templates VALUES ('t', '00', 0, '[]');
             INSERT INTO actors VALUES ('a', 't', 'w1', 1);",
        )
        .expect("old schema");
    }
    let dir = SqliteDirectory::open(&path).expect("open and migrate");
    assert_eq!(dir.actors().expect("actors").len(), 1);
    assert_eq!(dir.alarm("a").expect("read"), None);
    dir.set_alarm("a", 1_000).expect("set");
    dir.set_alarm("a", 2_000).expect("replace");
    assert_eq!(dir.alarm("a").expect("read"), Some(2_000));
    assert!(!dir.clear_alarm("a", Some(1_000)).expect("stale clear"));
    assert_eq!(dir.alarms().expect("all"), vec![("a".to_owned(), 2_000)]);
    drop(dir);
    let dir = SqliteDirectory::open(&path).expect("reopen");
    assert_eq!(dir.alarm("a").expect("read"), Some(2_000));
    dir.delete_actor("a").expect("delete");
    assert_eq!(dir.alarms().expect("all"), Vec::new());
    dir.set_alarm("b", 5).expect("set");
    assert!(dir.clear_alarm("b", None).expect("cancel"));
    assert!(!dir.clear_alarm("b", None).expect("cancel again"));
}
