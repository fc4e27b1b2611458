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
                ..Default::default()
            }],
            config: Default::default(),
            schema: None,
            throttled_replicas: Default::default(),
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

/// Fences the followers 3 and 2 (the ISR shrinks to the leader, 1), then
/// 1: no in-sync replica lives, nobody leads, 1 stays the ISR.
fn fence_every_in_sync_replica(c: &mut Catalog) {
    fence(c, 3, true);
    fence(c, 2, true);
    assert_eq!(state(c), (1, vec![1], 0, 2));
    fence(c, 1, true);
    assert_eq!(state(c), (NO_LEADER, vec![1], 1, 3));
}

#[test]
fn the_last_in_sync_replica_stays_and_leads_again_when_back() {
    let mut c = cluster();
    fence_every_in_sync_replica(&mut c);
    // 2 comes back: not in sync, still no leader.
    fence(&mut c, 2, false);
    assert_eq!(state(&c), (NO_LEADER, vec![1], 1, 3));
    fence(&mut c, 1, false);
    assert_eq!(state(&c), (1, vec![1], 2, 4));
}

#[test]
fn a_topic_allowing_unclean_elections_takes_a_live_replica_out_of_sync() {
    let mut c = cluster();
    c.topics
        .get_mut("t")
        .unwrap()
        .config
        .unclean_leader_election = true;
    // While an in-sync replica lives, it leads: nothing unclean.
    fence_every_in_sync_replica(&mut c);
    // 2 comes back out of sync: it leads, the ISR alone, in a new epoch.
    fence(&mut c, 2, false);
    assert_eq!(state(&c), (2, vec![2], 2, 4));
    // 1, back, does not take over (it is no longer in sync).
    fence(&mut c, 1, false);
    assert_eq!(state(&c), (2, vec![2], 2, 4));
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

fn isr_change(c: &Catalog, isr: Vec<i32>) -> IsrChange {
    let t = &c.topics["t"];
    let r = &t.replication[0];
    IsrChange {
        topic: "t".into(),
        topic_id: t.id,
        partition: 0,
        leader: t.nodes[0],
        leader_epoch: r.leader_epoch,
        partition_epoch: r.partition_epoch,
        isr,
    }
}

/// A move to new replicas keeps the old ones until every new one is in
/// sync, then drops them, and a leader among them hands over in a new
/// epoch; never fewer in-sync copies than before.
#[test]
fn a_reassignment_removes_old_replicas_only_once_the_new_ones_are_in_sync() {
    use reassign::{finish_reassignments, reassign, Reassignment};
    let mut c = cluster();
    c.nodes.insert(4, node(4));
    c.nodes.insert(5, node(5));
    assert_eq!(
        reassign(&mut c, "t", 0, Some(vec![4, 5, 2])),
        Reassignment::Accepted
    );
    let r = c.topics["t"].replication[0].clone();
    assert_eq!(r.replicas, vec![4, 5, 2, 1, 3]);
    assert_eq!(
        (r.adding.clone(), r.removing.clone()),
        (vec![4, 5], vec![1, 3])
    );
    assert_eq!(state(&c), (1, vec![1, 2, 3], 0, 1));
    // 4 catches up: 5 has not yet, nothing is removed.
    let change = isr_change(&c, vec![1, 2, 3, 4]);
    alter_isr(&mut c, &change).unwrap();
    finish_reassignments(&mut c);
    assert_eq!(c.topics["t"].replication[0].replicas.len(), 5);
    // 5 too: the move ends; leader 1 leaves, 4 (first in sync) leads.
    let change = isr_change(&c, vec![1, 2, 3, 4, 5]);
    alter_isr(&mut c, &change).unwrap();
    finish_reassignments(&mut c);
    let r = c.topics["t"].replication[0].clone();
    assert!(!r.reassigning());
    assert_eq!((r.replicas, r.isr), (vec![4, 5, 2], vec![4, 5, 2]));
    assert_eq!((c.topics["t"].nodes[0], r.leader_epoch), (4, 1));
    // Nothing to cancel now.
    assert_eq!(reassign(&mut c, "t", 0, None), Reassignment::NoneInProgress);
}

#[test]
fn a_cancelled_or_replaced_reassignment_goes_back_to_where_it_started() {
    use reassign::{reassign, Reassignment};
    let mut c = cluster();
    c.nodes.insert(4, node(4));
    c.nodes.insert(5, node(5));
    reassign(&mut c, "t", 0, Some(vec![4, 2, 3]));
    // Replaced: 4 leaves, 5 comes; the original replicas stay.
    reassign(&mut c, "t", 0, Some(vec![5, 2, 3]));
    let r = c.topics["t"].replication[0].clone();
    assert_eq!(
        (r.replicas, r.adding, r.removing),
        (vec![5, 2, 3, 1], vec![5], vec![1])
    );
    assert_eq!(reassign(&mut c, "t", 0, None), Reassignment::Accepted);
    let r = c.topics["t"].replication[0].clone();
    assert_eq!(
        (r.replicas.clone(), r.isr.clone()),
        (vec![2, 3, 1], vec![1, 2, 3])
    );
    assert!(!r.reassigning());
    // Bad targets are refused, saying why.
    for bad in [vec![], vec![2, 2], vec![9]] {
        assert!(matches!(
            reassign(&mut c, "t", 0, Some(bad)),
            Reassignment::Invalid(_)
        ));
    }
    assert_eq!(
        reassign(&mut c, "t", 7, Some(vec![1])),
        Reassignment::Unknown
    );
}

/// Dropping replicas (all of the target already in sync) ends at once;
/// a topic kept on one replica per partition can move one of them.
#[test]
fn a_shrink_ends_at_once_and_a_single_replica_can_move() {
    use reassign::{finish_reassignments, reassign};
    let mut c = cluster();
    reassign(&mut c, "t", 0, Some(vec![2, 3]));
    let r = c.topics["t"].replication[0].clone();
    assert_eq!((r.replicas, r.isr), (vec![2, 3], vec![2, 3]));
    assert_eq!((c.topics["t"].nodes[0], r.leader_epoch), (2, 1));

    let mut single = c.topics["t"].clone();
    single.name = "one".into();
    single.shards = vec![0, 0];
    single.nodes = vec![1, 2];
    single.replication.clear();
    c.topics.insert("one".into(), single);
    reassign(&mut c, "one", 1, Some(vec![3]));
    let t = &c.topics["one"];
    assert_eq!(t.replication.len(), 2);
    assert_eq!(t.replication[0].replicas, vec![1]);
    assert_eq!(t.replication[1].replicas, vec![3, 2]);
    let r = &t.replication[1];
    let change = IsrChange {
        topic: "one".into(),
        topic_id: t.id,
        partition: 1,
        leader: 2,
        leader_epoch: r.leader_epoch,
        partition_epoch: r.partition_epoch,
        isr: vec![2, 3],
    };
    alter_isr(&mut c, &change).unwrap();
    finish_reassignments(&mut c);
    let t = &c.topics["one"];
    assert_eq!(
        (t.nodes[1], t.replication[1].replicas.clone()),
        (3, vec![3])
    );
}

/// A node leaving hands each of its copies to the live node keeping the
/// fewest, in its place in the replica order; where no node is spare, a
/// partition keeps its other replicas if they are enough for
/// min.insync.replicas, and the drain is refused otherwise.
#[test]
fn a_drain_moves_every_copy_off_the_node_or_says_which_cannot_move() {
    use reassign::{drain, kept_by, reassign};
    let mut c = cluster();
    c.nodes.insert(4, node(4));
    let moves = drain(&c, 1).unwrap();
    assert_eq!(moves, vec![("t".to_string(), 0, Some(vec![4, 2, 3]))]);
    for (t, p, target) in moves {
        reassign(&mut c, &t, p, target);
    }
    assert_eq!(
        kept_by(&c, 1),
        1,
        "until node 4 is in sync, node 1 keeps its copy"
    );
    let change = isr_change(&c, vec![1, 2, 3, 4]);
    alter_isr(&mut c, &change).unwrap();
    reassign::finish_reassignments(&mut c);
    assert_eq!(kept_by(&c, 1), 0);
    assert_eq!(c.topics["t"].nodes[0], 4);

    // Three nodes, three replicas: none spare; min.insync.replicas 2 lets
    // the partition keep two, 3 does not.
    let mut c = cluster();
    assert_eq!(
        drain(&c, 3).unwrap(),
        vec![("t".to_string(), 0, Some(vec![1, 2]))]
    );
    c.topics.get_mut("t").unwrap().config.min_insync_replicas = 3;
    let e = drain(&c, 3).unwrap_err();
    assert!(e.contains("t-0"), "{e}");
}

/// A node added keeping nothing takes replicas from the nodes keeping
/// the most until no two live nodes differ by more than one.
#[test]
fn replica_balancing_fills_a_new_node_until_the_nodes_are_even() {
    use reassign::{finish_reassignments, reassign, spread};
    let mut c = cluster();
    let mut t = c.topics["t"].clone();
    t.name = "u".into();
    t.shards = vec![0; 4];
    t.nodes = vec![1, 2, 3, 1];
    t.replication = vec![c.topics["t"].replication[0].clone(); 4];
    c.topics.insert("u".into(), t);
    c.nodes.insert(4, node(4));
    // 15 replicas over nodes 1-3 (5 each), none on 4: 4 moves even them
    // (4, 4, 4, 3) and nothing more is moved after.
    let mut rounds = 0;
    loop {
        let moves = spread(&c, 2);
        if moves.is_empty() {
            break;
        }
        rounds += 1;
        assert!(rounds < 10, "balancing does not settle");
        for (topic, p, target) in moves {
            reassign(&mut c, &topic, p, target);
            // The new copy catches up.
            let t = &c.topics[&topic];
            let r = &t.replication[p as usize];
            let change = IsrChange {
                topic: topic.clone(),
                topic_id: t.id,
                partition: p,
                leader: t.nodes[p as usize],
                leader_epoch: r.leader_epoch,
                partition_epoch: r.partition_epoch,
                isr: r.replicas.clone(),
            };
            alter_isr(&mut c, &change).unwrap();
            finish_reassignments(&mut c);
        }
    }
    let mut kept = std::collections::BTreeMap::new();
    for (_, _, _, r) in c.replicated() {
        for n in &r.replicas {
            *kept.entry(*n).or_insert(0) += 1;
        }
    }
    assert_eq!(
        kept.values().copied().max().unwrap() - kept.values().copied().min().unwrap(),
        1,
        "{kept:?}"
    );
    assert_eq!(kept[&4], 3, "{kept:?}");
    assert_eq!(rounds, 2);
}

/// A move replaced by another keeps the copies both share, in sync ones
/// staying in sync (Kafka's controller changes a reassignment so).
#[test]
fn a_replaced_move_keeps_the_copies_both_targets_share() {
    use reassign::reassign;
    let mut c = cluster();
    for n in 4..=6 {
        c.nodes.insert(n, node(n));
    }
    reassign(&mut c, "t", 0, Some(vec![4, 5, 3]));
    let change = isr_change(&c, vec![1, 2, 3, 4]);
    alter_isr(&mut c, &change).unwrap();
    reassign::finish_reassignments(&mut c);
    reassign(&mut c, "t", 0, Some(vec![4, 6, 3]));
    let r = c.topics["t"].replication[0].clone();
    assert_eq!(r.replicas, vec![4, 6, 3, 1, 2]);
    assert_eq!((r.adding, r.removing), (vec![4, 6], vec![1, 2]));
    assert_eq!(r.isr, vec![4, 3, 1, 2]);
}
