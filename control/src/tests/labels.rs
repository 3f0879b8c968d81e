//! The label index of a deciding control plane's placements: it follows
//! every change of an actor's labels, its delete and its replacement, and
//! keeps no name under a label the actor no longer has.

use std::sync::Arc;

use stasis_contract::labels::Labels;

use crate::placement::{Placement, PlacementTable};

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn labelled(pairs: &[(&str, &str)]) -> Placement {
    Placement::new(Arc::from("w1"), 0, "t", 1).labelled(&labels(pairs))
}

#[test]
fn the_label_index_follows_changes_deletes_and_replacements() {
    let table = PlacementTable::default();
    let gold = |table: &PlacementTable| table.labelled("tier", "gold", None, 10);
    table.place("a", labelled(&[("tier", "gold"), ("team", "x")]));
    table.place("b", labelled(&[("tier", "gold")]));
    table.place("c", labelled(&[]));
    assert_eq!(gold(&table), ["a", "b"]);
    assert_eq!(table.labelled("tier", "gold", Some("a"), 10), ["b"]);
    assert_eq!(table.labelled("tier", "gold", None, 1), ["a"]);
    // A change moves the name from the old label to the new one and
    // leaves the labels it kept.
    table.set_labels("a", labels(&[("tier", "free"), ("team", "x")]));
    assert_eq!(gold(&table), ["b"]);
    assert_eq!(table.labelled("tier", "free", None, 10), ["a"]);
    assert_eq!(table.labelled("team", "x", None, 10), ["a"]);
    // A delete, and a placement replaced without the label.
    table.remove("a");
    assert!(table.labelled("tier", "free", None, 10).is_empty());
    assert!(table.labelled("team", "x", None, 10).is_empty());
    table.place("b", labelled(&[("tier", "silver")]));
    assert!(gold(&table).is_empty());
    assert_eq!(table.labelled("tier", "silver", None, 10), ["b"]);
    table.set_labels("c", labels(&[("tier", "gold")]));
    assert_eq!(gold(&table), ["c"]);
}
