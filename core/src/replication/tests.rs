use super::*;
use crate::catalog::{ClusterNode, Replicas, TopicMeta};

fn node(id: i32) -> ClusterNode {
    ClusterNode {
        id,
        kafka_host: "127.0.0.1".into(),
        kafka_port: 9092,
        http: String::new(),
        peer: String::new(),
        rack: None,
        shards: 1,
        shard_port_base: None,
        fenced: false,
        incarnation: 1,
        stopping: false,
    }
}

/// Three nodes, one topic of one partition on all three, led by 1.
fn cluster() -> Catalog {
    let mut c = Catalog::default();
    for id in 1..=3 {
        c.nodes.insert(id, node(id));
    }
    c.topics.insert(
        "t".into(),
        TopicMeta {
            name: "t".into(),
            id: [1; 16],
            shards: vec![0],
            nodes: vec![1],
            replication: vec![Replicas {
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                leader_epoch: 0,
                partition_epoch: 0,
            }],
            config: Default::default(),
            schema: None,
        },
    );
    c
}

fn fence(c: &mut Catalog, id: i32, fenced: bool) {
    c.nodes.get_mut(&id).unwrap().fenced = fenced;
    elect_leaders(c);
}

fn state(c: &Catalog) -> (i32, Vec<i32>, i32, i32) {
    let t = &c.topics["t"];
    let r = &t.replication[0];
    (t.nodes[0], r.isr.clone(), r.leader_epoch, r.partition_epoch)
}

#[test]
fn a_fenced_leader_gives_way_to_the_next_in_sync_replica_in_a_new_epoch() {
    let mut c = cluster();
    fence(&mut c, 1, true);
    assert_eq!(state(&c), (2, vec![2, 3], 1, 1));
    // Back, it is not in sync: it leads nothing and does not rejoin by
    // itself (its leader asks when it has caught up).
    fence(&mut c, 1, false);
    assert_eq!(state(&c), (2, vec![2, 3], 1, 1));
}

#[test]
fn a_fenced_follower_leaves_the_isr_without_an_election() {
    let mut c = cluster();
    fence(&mut c, 3, true);
    assert_eq!(state(&c), (1, vec![1, 2], 0, 1));
}

#[test]
fn the_last_in_sync_replica_stays_and_leads_again_when_back() {
    let mut c = cluster();
    fence(&mut c, 3, true);
    fence(&mut c, 2, true);
    assert_eq!(state(&c), (1, vec![1], 0, 2));
    fence(&mut c, 1, true);
    // No unclean election: nobody leads, 1 stays the ISR.
    assert_eq!(state(&c), (NO_LEADER, vec![1], 1, 3));
    // 2 comes back: not in sync, still no leader.
    fence(&mut c, 2, false);
    assert_eq!(state(&c), (NO_LEADER, vec![1], 1, 3));
    fence(&mut c, 1, false);
    assert_eq!(state(&c), (1, vec![1], 2, 4));
}

#[test]
fn isr_changes_only_from_the_leader_in_its_epochs() {
    let mut c = cluster();
    fence(&mut c, 3, true);
    let change = |isr: Vec<i32>, leader: i32, le: i32, pe: i32| IsrChange {
        topic: "t".into(),
        topic_id: [1; 16],
        partition: 0,
        leader,
        leader_epoch: le,
        partition_epoch: pe,
        isr,
    };
    // 3 is fenced: it cannot join.
    let e = alter_isr(&mut c, &change(vec![1, 2, 3], 1, 0, 1)).unwrap_err();
    assert!(e.contains("fenced"), "{e}");
    fence(&mut c, 3, false);
    // A stale partition epoch, another leader, a stale leader epoch.
    assert!(alter_isr(&mut c, &change(vec![1, 2, 3], 1, 0, 0)).is_err());
    assert!(alter_isr(&mut c, &change(vec![1, 2, 3], 2, 0, 1)).is_err());
    assert!(alter_isr(&mut c, &change(vec![1, 2, 3], 1, 5, 1)).is_err());
    // Without the leader, or with a node that holds no replica.
    assert!(alter_isr(&mut c, &change(vec![2, 3], 1, 0, 1)).is_err());
    assert!(alter_isr(&mut c, &change(vec![1, 4], 1, 0, 1)).is_err());
    alter_isr(&mut c, &change(vec![3, 1, 2], 1, 0, 1)).unwrap();
    assert_eq!(state(&c), (1, vec![1, 2, 3], 0, 2));
}

/// A restarted node registers in a new incarnation and comes in fenced:
/// its leadership moves in a new epoch and it leaves the ISR (its log may
/// have lost an unsynced tail its followers hold). Registering again in
/// the same incarnation changes nothing; the fence lifts as usual.
#[test]
fn a_restarted_node_registers_fenced_and_its_leadership_moves() {
    use crate::cluster::state_machine::apply;
    use crate::cluster::types::{Applied, Command};
    let c = cluster();
    let mut again = node(1);
    again.incarnation = 2;
    let (applied, next) = apply(&c, Command::Register(again.clone()));
    assert!(matches!(applied, Applied::Version(_)), "{applied:?}");
    let mut c = next.unwrap();
    assert!(c.nodes[&1].fenced);
    assert_eq!(state(&c), (2, vec![2, 3], 1, 1));
    let (applied, next) = apply(&c, Command::Register(again));
    assert!(matches!(applied, Applied::Unchanged), "{applied:?}");
    assert!(next.is_none());
    fence(&mut c, 1, false);
    assert_eq!(state(&c), (2, vec![2, 3], 1, 1));
    // The same incarnation as recorded: nothing happens.
    let (applied, _) = apply(&c, Command::Register(c.nodes[&2].clone()));
    assert!(matches!(applied, Applied::Unchanged), "{applied:?}");
}

/// A preferred election moves leadership back to the first replica only
/// once it is live and in sync; an unclean one only where no live replica
/// leads, and then from outside the ISR if it must.
#[test]
fn elections_asked_for_move_leadership_only_where_they_may() {
    let mut c = cluster();
    assert_eq!(elect(&mut c, "t", 0, false), Election::NotNeeded);
    assert!(imbalanced(&c).is_empty());
    fence(&mut c, 1, true);
    assert_eq!(state(&c), (2, vec![2, 3], 1, 1));
    fence(&mut c, 1, false);
    // Back but not in sync: it may not lead yet.
    assert!(matches!(
        elect(&mut c, "t", 0, false),
        Election::NotAvailable(_)
    ));
    assert!(imbalanced(&c).is_empty());
    c.topics.get_mut("t").unwrap().replication[0].isr = vec![1, 2, 3];
    assert_eq!(imbalanced(&c), vec![("t".to_string(), 0)]);
    assert_eq!(elect(&mut c, "t", 0, false), Election::Elected);
    assert_eq!(state(&c), (1, vec![1, 2, 3], 2, 2));
    assert_eq!(elect(&mut c, "t", 1, false), Election::Unknown);
    assert_eq!(elect(&mut c, "u", 0, false), Election::Unknown);
    // A live leader: no unclean election.
    assert_eq!(elect(&mut c, "t", 0, true), Election::NotNeeded);
    // Every in-sync replica fenced, 3 back out of sync: only an unclean
    // election gives the partition a leader, 3 alone in its ISR.
    fence(&mut c, 3, true);
    fence(&mut c, 2, true);
    fence(&mut c, 1, true);
    fence(&mut c, 3, false);
    assert_eq!(state(&c).0, NO_LEADER);
    assert!(matches!(
        elect(&mut c, "t", 0, false),
        Election::NotAvailable(_)
    ));
    assert_eq!(elect(&mut c, "t", 0, true), Election::Elected);
    assert_eq!(state(&c).0, 3);
    assert_eq!(state(&c).1, vec![3]);
}

/// A node stopping on purpose (controlled shutdown) is fenced at once,
/// its leadership moving in a new epoch; a lift of its fence decided
/// before is refused; it comes back only by registering anew (fenced, as
/// every restart, and no longer stopping).
#[test]
fn a_stopping_node_hands_its_leaderships_over_and_stays_fenced() {
    use crate::cluster::state_machine::apply;
    use crate::cluster::types::{Applied, Command};
    let c = cluster();
    let stop = |incarnation| Command::ShutDown {
        node: 1,
        incarnation,
    };
    // Another run of the node than the one registered: nothing.
    let (answer, next) = apply(&c, stop(9));
    assert!(matches!(answer, Applied::Unchanged) && next.is_none());
    let c = apply(&c, stop(1)).1.expect("applied");
    assert_eq!(state(&c), (2, vec![2, 3], 1, 1));
    assert!(c.nodes[&1].stopping && c.nodes[&1].fenced);
    let lift = Command::Fence {
        node: 1,
        fenced: false,
    };
    let (answer, next) = apply(&c, lift);
    assert!(matches!(answer, Applied::Unchanged) && next.is_none());
    let mut again = node(1);
    again.incarnation = 2;
    let c = apply(&c, Command::Register(again)).1.expect("applied");
    assert!(c.nodes[&1].fenced && !c.nodes[&1].stopping);
}
