use super::*;

fn topics() -> BTreeMap<String, i32> {
    [
        ("t".to_string(), 4),
        ("u".to_string(), 2),
        ("other".to_string(), 1),
    ]
    .into()
}

fn join(g: &mut ConsumerGroup, id: &str, subs: &[&str], now: i64) -> Answer {
    g.heartbeat(
        Heartbeat {
            member_id: id.into(),
            epoch: JOIN,
            rebalance_timeout_ms: 10_000,
            subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
            owned: Some(BTreeSet::new()),
            ..Default::default()
        },
        &topics(),
        &mut || unreachable!("ids are the client's"),
        now,
    )
    .unwrap()
}

fn beat(
    g: &mut ConsumerGroup,
    id: &str,
    epoch: i32,
    owned: &BTreeSet<Tp>,
    now: i64,
) -> Result<Answer, Refusal> {
    g.heartbeat(
        Heartbeat {
            member_id: id.into(),
            epoch,
            owned: Some(owned.clone()),
            ..Default::default()
        },
        &topics(),
        &mut || unreachable!(),
        now,
    )
}

fn parts(ps: &[i32]) -> BTreeSet<Tp> {
    ps.iter().map(|p| Tp::new("t", *p)).collect()
}

/// A second member joins: the first gives back half its partitions at
/// its old epoch; the second gets them only once they are given back;
/// no partition is ever owned twice; both end stable at the new epoch.
#[test]
fn a_joining_member_gets_partitions_only_once_they_are_revoked() {
    let mut g = ConsumerGroup::new(45_000);
    let a = join(&mut g, "a", &["t"], 0);
    assert_eq!(a.epoch, 1);
    assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3])));
    assert_eq!(g.state(), "Stable");
    let b = join(&mut g, "b", &["t"], 10);
    assert_eq!(b.epoch, 2);
    // Everything b is meant for is still a's.
    assert_eq!(b.assignment, Some(BTreeSet::new()));
    assert_eq!(g.state(), "Reconciling");
    // a is told to keep two (revoke two), still at epoch 1.
    let a = beat(&mut g, "a", 1, &parts(&[0, 1, 2, 3]), 20).unwrap();
    assert_eq!(a.epoch, 1);
    let kept = a.assignment.clone().unwrap();
    assert_eq!(kept.len(), 2);
    // b asks again before a has revoked: nothing yet.
    let b = beat(&mut g, "b", 2, &BTreeSet::new(), 30).unwrap();
    assert_eq!(b.assignment, None);
    // a has revoked: epoch 2; then b gets the other two.
    let a = beat(&mut g, "a", 1, &kept, 40).unwrap();
    assert_eq!((a.epoch, a.assignment), (2, None));
    let b = beat(&mut g, "b", 2, &BTreeSet::new(), 50).unwrap();
    let got = b.assignment.unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.is_disjoint(&kept));
    assert_eq!(g.state(), "Stable");
}

#[test]
fn a_stale_or_unknown_member_is_refused() {
    let mut g = ConsumerGroup::new(45_000);
    join(&mut g, "a", &["t"], 0);
    assert_eq!(
        beat(&mut g, "a", 7, &BTreeSet::new(), 1).unwrap_err().0,
        ErrorCode::FencedMemberEpoch
    );
    assert_eq!(
        beat(&mut g, "x", 1, &BTreeSet::new(), 1).unwrap_err().0,
        ErrorCode::UnknownMemberId
    );
    assert_eq!(g.check_commit("a", 1), ErrorCode::None);
    assert_eq!(g.check_commit("a", 0), ErrorCode::StaleMemberEpoch);
    assert_eq!(g.check_commit("", -1), ErrorCode::UnknownMemberId);
}

#[test]
fn a_silent_member_is_removed_and_its_partitions_move() {
    let mut g = ConsumerGroup::new(1_000);
    join(&mut g, "a", &["t"], 0);
    join(&mut g, "b", &["t"], 0);
    let a = beat(&mut g, "a", 1, &parts(&[0, 1, 2, 3]), 100).unwrap();
    let kept = a.assignment.unwrap();
    beat(&mut g, "a", 1, &kept, 200).unwrap();
    // b never heartbeats again.
    assert_eq!(g.expire(900), Vec::<String>::new());
    beat(&mut g, "a", 2, &kept, 1_100).unwrap();
    assert_eq!(g.expire(1_500), vec!["b".to_string()]);
    let a = beat(&mut g, "a", 2, &kept, 1_600).unwrap();
    assert_eq!(a.epoch, g.epoch);
    assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3])));
}

#[test]
fn range_gives_contiguous_ranges_per_topic() {
    let mut g = ConsumerGroup::new(45_000);
    let hb = |id: &str| Heartbeat {
        member_id: id.into(),
        epoch: JOIN,
        rebalance_timeout_ms: 1_000,
        subscribed: Some(vec!["t".into(), "u".into()]),
        assignor: Some("range".into()),
        owned: Some(BTreeSet::new()),
        ..Default::default()
    };
    g.heartbeat(hb("a"), &topics(), &mut || unreachable!(), 0)
        .unwrap();
    g.heartbeat(hb("b"), &topics(), &mut || unreachable!(), 0)
        .unwrap();
    assert_eq!(g.assignor(), "range");
    let want_a: BTreeSet<Tp> = [Tp::new("t", 0), Tp::new("t", 1), Tp::new("u", 0)].into();
    assert_eq!(g.target["a"], want_a);
    let refused = g.heartbeat(
        Heartbeat {
            assignor: Some("fancy".into()),
            ..hb("c")
        },
        &topics(),
        &mut || unreachable!(),
        0,
    );
    assert_eq!(refused.unwrap_err().0, ErrorCode::UnsupportedAssignor);
}

/// Members subscribing to different topics: each topic is balanced
/// over its own subscribers (a member loaded with another topic's
/// partitions is not asked for this topic's).
#[test]
fn uniform_balances_each_topic_over_its_subscribers() {
    let mut g = ConsumerGroup::new(45_000);
    let hb = |id: &str, subs: &[&str]| Heartbeat {
        member_id: id.into(),
        epoch: JOIN,
        rebalance_timeout_ms: 1_000,
        subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
        owned: Some(BTreeSet::new()),
        ..Default::default()
    };
    g.heartbeat(
        hb("a", &["t", "other"]),
        &topics(),
        &mut || unreachable!(),
        0,
    )
    .unwrap();
    g.heartbeat(
        hb("b", &["other", "u"]),
        &topics(),
        &mut || unreachable!(),
        0,
    )
    .unwrap();
    g.heartbeat(hb("c", &["u"]), &topics(), &mut || unreachable!(), 0)
        .unwrap();
    let of = |m: &str, t: &str| g.target[m].iter().filter(|p| p.topic() == t).count();
    assert_eq!((of("a", "t"), of("b", "t"), of("c", "t")), (4, 0, 0));
    assert_eq!(of("a", "other") + of("b", "other"), 1);
    assert_eq!((of("b", "u"), of("c", "u")), (1, 1));
}

/// A regular expression subscribes to whole topic names that match it,
/// the topics made later too; an invalid one is refused.
#[test]
fn a_regular_expression_follows_the_topics() {
    let mut g = ConsumerGroup::new(45_000);
    let hb = Heartbeat {
        member_id: "a".into(),
        epoch: JOIN,
        rebalance_timeout_ms: 1_000,
        subscribed: Some(vec![]),
        regex: Some("t|u".into()),
        owned: Some(BTreeSet::new()),
        ..Default::default()
    };
    let a = g
        .heartbeat(hb.clone(), &topics(), &mut || unreachable!(), 0)
        .unwrap();
    assert_eq!(a.assignment.unwrap().len(), 6);
    let mut more = topics();
    more.insert("u".into(), 3);
    more.insert("tt".into(), 1);
    let owned: BTreeSet<Tp> = g.members["a"].assigned.clone();
    let again = g
        .heartbeat(
            Heartbeat {
                epoch: a.epoch,
                regex: None,
                subscribed: None,
                owned: Some(owned),
                ..hb.clone()
            },
            &more,
            &mut || unreachable!(),
            1,
        )
        .unwrap();
    // "tt" does not match the whole of "t|u"; u's new partition does.
    assert_eq!(again.epoch, a.epoch + 1);
    assert_eq!(again.assignment.unwrap().len(), 7);
    let bad = Heartbeat {
        member_id: "b".into(),
        regex: Some("(".into()),
        ..hb
    };
    let refused = g.heartbeat(bad, &topics(), &mut || unreachable!(), 2);
    assert_eq!(refused.unwrap_err().0, ErrorCode::InvalidRegularExpression);
}

/// A static member that leaves for now (-2) and comes back with a new
/// member id takes its partitions back without a new epoch.
#[test]
fn a_static_member_comes_back_to_its_partitions() {
    let mut g = ConsumerGroup::new(45_000);
    let hb = |id: &str, epoch: i32| Heartbeat {
        member_id: id.into(),
        epoch,
        instance_id: Some("i-1".into()),
        rebalance_timeout_ms: 1_000,
        subscribed: Some(vec!["t".into()]),
        owned: Some(BTreeSet::new()),
        ..Default::default()
    };
    let a = g
        .heartbeat(hb("a", JOIN), &topics(), &mut || unreachable!(), 0)
        .unwrap();
    let epoch = g.epoch;
    g.heartbeat(hb("a", LEAVE_STATIC), &topics(), &mut || unreachable!(), 10)
        .unwrap();
    let back = g
        .heartbeat(hb("a2", JOIN), &topics(), &mut || unreachable!(), 20)
        .unwrap();
    assert_eq!(back.assignment, a.assignment);
    assert_eq!((g.epoch, back.epoch), (epoch, a.epoch));
}
