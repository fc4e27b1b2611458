use super::*;

fn cfg() -> GroupConfig {
    GroupConfig {
        min_session_timeout: Duration::from_millis(1),
        max_session_timeout: Duration::from_secs(3600),
        initial_rebalance_delay: Duration::ZERO,
        ..GroupConfig::default()
    }
}

fn req(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member.into(),
        instance_id: instance.map(String::from),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(p.to_string())))
            .collect(),
        require_known_member_id: true,
    }
}

/// The answer, which must be there already (now or completed).
fn sreq(
    member: &str,
    instance: Option<&str>,
    generation: i32,
    assignments: Vec<(String, Bytes)>,
) -> SyncRequest {
    SyncRequest {
        member_id: member.into(),
        instance_id: instance.map(String::from),
        generation,
        protocol_type: None,
        protocol_name: None,
        assignments,
    }
}

fn now_answer<T>(a: Answer<T>) -> T {
    match a {
        Answer::Now(t) => t,
        Answer::Later(mut rx) => rx.try_recv().unwrap().expect("answered"),
    }
}

fn later<T>(a: Answer<T>) -> oneshot::Receiver<T> {
    match a {
        Answer::Later(rx) => rx,
        Answer::Now(_) => panic!("expected to wait"),
    }
}

/// Joins a new dynamic member through MEMBER_ID_REQUIRED.
fn join_new(g: &mut Group, now: Instant) -> (String, oneshot::Receiver<JoinResult>) {
    let first = now_answer(g.join(req("", None, &["range"]), now, &cfg()));
    assert_eq!(first.error, ErrorCode::MemberIdRequired);
    let id = first.member_id.clone();
    (
        id.clone(),
        later(g.join(req(&id, None, &["range"]), now, &cfg())),
    )
}

#[test]
fn one_member_becomes_stable() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    let (id, mut rx) = join_new(&mut g, now);
    let r = rx.try_recv().unwrap().expect("joined");
    assert_eq!(r.error, ErrorCode::None);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.leader, id);
    assert_eq!(r.members.len(), 1);
    assert_eq!(g.state, GroupState::CompletingRebalance);
    let mut rx = later(g.sync(
        sreq(&id, None, 1, vec![(id.clone(), Bytes::from("a"))]),
        now,
    ));
    let s = rx.try_recv().unwrap().expect("synced");
    assert_eq!(s.assignment, Bytes::from("a"));
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.heartbeat(&id, None, 1, now), ErrorCode::None);
    assert_eq!(g.heartbeat(&id, None, 0, now), ErrorCode::IllegalGeneration);
    assert_eq!(
        g.heartbeat("nobody", None, 1, now),
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn second_member_rebalances_and_leave_rebalances_again() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    let (a, mut rx) = join_new(&mut g, now);
    rx.try_recv().unwrap().unwrap();
    now_answer(g.sync(sreq(&a, None, 1, vec![]), now));
    let (b, mut rxb) = join_new(&mut g, now);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert!(rxb.try_recv().unwrap().is_none(), "waits for the leader");
    assert_eq!(
        g.heartbeat(&a, None, 1, now),
        ErrorCode::RebalanceInProgress
    );
    assert_eq!(g.check_commit(&a, None, 1), ErrorCode::None);
    let mut rxa = later(g.join(req(&a, None, &["range"]), now, &cfg()));
    let ra = rxa.try_recv().unwrap().unwrap();
    let rb = rxb.try_recv().unwrap().unwrap();
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.leader, a);
    assert_eq!(ra.members.len(), 2);
    assert!(rb.members.is_empty());
    assert_eq!(g.check_commit(&a, None, 2), ErrorCode::RebalanceInProgress);
    let mut wait_b = later(g.sync(sreq(&b, None, 2, vec![]), now));
    let assign = vec![
        (a.clone(), Bytes::from("pa")),
        (b.clone(), Bytes::from("pb")),
    ];
    let mut wait_a = later(g.sync(sreq(&a, None, 2, assign), now));
    assert_eq!(
        wait_b.try_recv().unwrap().unwrap().assignment,
        Bytes::from("pb")
    );
    assert_eq!(
        wait_a.try_recv().unwrap().unwrap().assignment,
        Bytes::from("pa")
    );
    assert_eq!(g.leave(&b, None, now, &cfg()), ErrorCode::None);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    let mut rxa = later(g.join(req(&a, None, &["range"]), now, &cfg()));
    assert_eq!(rxa.try_recv().unwrap().unwrap().generation_id, 3);
    assert_eq!(g.leave(&b, None, now, &cfg()), ErrorCode::UnknownMemberId);
}

#[test]
fn quiet_member_expires() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    let (a, mut rx) = join_new(&mut g, now);
    rx.try_recv().unwrap().unwrap();
    now_answer(g.sync(sreq(&a, None, 1, vec![]), now));
    g.tick(now + Duration::from_secs(5), &cfg());
    assert!(g.has_member(&a));
    g.tick(now + Duration::from_secs(11), &cfg());
    assert!(!g.has_member(&a));
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(g.generation, 2);
}

#[test]
fn rebalance_timeout_drops_members_that_do_not_rejoin() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    let (a, mut rx) = join_new(&mut g, now);
    rx.try_recv().unwrap().unwrap();
    now_answer(g.sync(sreq(&a, None, 1, vec![]), now));
    let (_b, mut rxb) = join_new(&mut g, now);
    // a keeps heartbeating but never rejoins.
    for t in (5..30).step_by(5) {
        let at = now + Duration::from_secs(t);
        assert_eq!(g.heartbeat(&a, None, 1, at), ErrorCode::RebalanceInProgress);
        g.tick(at, &cfg());
    }
    g.tick(now + Duration::from_secs(29), &cfg());
    assert!(rxb.try_recv().unwrap().is_none());
    g.tick(now + Duration::from_secs(31), &cfg());
    let rb = rxb.try_recv().unwrap().unwrap();
    assert_eq!(rb.generation_id, 2);
    assert_eq!(g.members.len(), 1);
    assert_eq!(rb.leader, rb.member_id);
}

#[test]
fn static_member_rejoins_without_rebalance_and_old_id_is_fenced() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    let mut rx = later(g.join(req("", Some("i1"), &["range"]), now, &cfg()));
    let r = rx.try_recv().unwrap().unwrap();
    let old = r.member_id.clone();
    now_answer(g.sync(
        sreq(&old, Some("i1"), 1, vec![(old.clone(), Bytes::from("x"))]),
        now,
    ));
    // Restarted: same instance id, no member id.
    let r2 = now_answer(g.join(req("", Some("i1"), &["range"]), now, &cfg()));
    assert_eq!(r2.error, ErrorCode::None);
    assert_eq!(r2.generation_id, 1, "no rebalance");
    assert_ne!(r2.member_id, old);
    assert!(r2.skip_assignment, "the static leader keeps the assignment");
    let s = now_answer(g.sync(sreq(&r2.member_id, Some("i1"), 1, vec![]), now));
    assert_eq!(s.assignment, Bytes::from("x"));
    assert_eq!(
        g.heartbeat(&old, Some("i1"), 1, now),
        ErrorCode::FencedInstanceId
    );
    assert_eq!(g.state, GroupState::Stable);
}

#[test]
fn protocols_must_overlap() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    let mut rx = later(g.join(req("", Some("i"), &["range", "roundrobin"]), now, &cfg()));
    rx.try_recv().unwrap().unwrap();
    let r = now_answer(g.join(req("", None, &["sticky"]), now, &cfg()));
    assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
    let mut other = req("", None, &["roundrobin"]);
    other.protocol_type = "connect".into();
    let r = now_answer(g.join(other, now, &cfg()));
    assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
}

#[test]
fn protocol_chosen_by_votes() {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    for (i, prefs) in [
        ["range", "roundrobin"],
        ["roundrobin", "range"],
        ["roundrobin", "range"],
    ]
    .iter()
    .enumerate()
    {
        let mut r = req("", Some(&format!("i{i}")), prefs);
        r.require_known_member_id = false;
        let _ = g.join(r, now, &cfg());
    }
    // The first member completed generation 1 alone; the others joined
    // a new rebalance, which completes when its time is up.
    g.tick(now + Duration::from_secs(31), &cfg());
    assert_eq!(g.protocol.as_deref(), Some("roundrobin"));
}

#[test]
fn subscription_topics() {
    let mut b = vec![0, 1, 0, 0, 0, 2];
    for t in ["ab", "c"] {
        b.extend((t.len() as i16).to_be_bytes());
        b.extend(t.as_bytes());
    }
    b.extend([0, 0, 0, 0]);
    assert_eq!(parse_subscription(&b), Some(vec!["ab".into(), "c".into()]));
    assert_eq!(parse_subscription(&b[..7]), None);
}
