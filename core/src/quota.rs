//! Client quotas, as Kafka's `ClientQuotaManager` keeps them: limits set
//! on users and client ids (AlterClientQuotas, kept in the catalog), the
//! limit that applies to a request (Kafka's precedence), and the rate of
//! each limited client measured over the last ten seconds.
//!
//! A limit is per node, across its shards: the rate of one sensor (the
//! user and client id a limit is counted under) lives on one shard, the
//! sensor's owner by hash, and each shard's requests record their bytes
//! or time there with one hop. Requests of clients no limit applies to
//! record nothing, and when no limit is set at all nothing is looked up.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, KafkaError};
use crate::shard::{Shard, ShardState};

/// A rate is measured over the last `SPAN_MS` (Kafka's quota window:
/// `quota.window.num` 11 samples of `quota.window.size.seconds` 1, all
/// but the current one full), in buckets of `BUCKET_MS`.
const SPAN_MS: i64 = 10_000;
const BUCKET_MS: i64 = 100;

/// The longest a request-time throttle lasts (Kafka's
/// `quota.window.size.seconds`).
const MAX_REQUEST_THROTTLE_MS: u32 = 1000;

/// Kafka's entity types.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// How a quota's value must look (Kafka's `QuotaConfig` types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Long,
    Int,
    Double,
}

/// The quota keys of users and client ids, then of IPs.
const USER_CLIENT_KEYS: &[(&str, Shape)] = &[
    ("producer_byte_rate", Shape::Long),
    ("consumer_byte_rate", Shape::Long),
    ("request_percentage", Shape::Double),
    ("controller_mutation_rate", Shape::Double),
];
const IP_KEYS: &[(&str, Shape)] = &[("connection_creation_rate", Shape::Int)];

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Bytes of produce requests a second.
    Produce,
    /// Bytes of fetch answers a second.
    Fetch,
    /// Handler time, as a percentage of one core (100 = one core).
    Request,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Produce => "producer_byte_rate",
            Kind::Fetch => "consumer_byte_rate",
            Kind::Request => "request_percentage",
        }
    }
}

/// An entity's name for one type: a name, or the type's default.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Name {
    Default,
    Named(String),
}

impl Name {
    /// As the protocol carries it (null: the default).
    pub fn wire(&self) -> Option<&str> {
        match self {
            Name::Default => None,
            Name::Named(n) => Some(n),
        }
    }
}

/// Who a quota is set on: a user, a client id, both, or an IP.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Name>,
}

impl Entity {
    /// Its parts as the protocol lists them: (type, name or null).
    pub fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        [
            (USER, &self.user),
            (CLIENT_ID, &self.client_id),
            (IP, &self.ip),
        ]
        .into_iter()
        .filter_map(|(t, n)| n.as_ref().map(|n| (t, n.wire())))
        .collect()
    }

    /// An entity from the protocol's parts, checked as Kafka's
    /// `ClientQuotaControlManager` checks it.
    pub fn parse<'a>(
        parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<Entity, KafkaError> {
        let invalid = |why: String| KafkaError::new(ErrorCode::InvalidRequest, why);
        let mut e = Entity::default();
        for (ty, name) in parts {
            let slot = match ty {
                USER => &mut e.user,
                CLIENT_ID => &mut e.client_id,
                IP => &mut e.ip,
                other => {
                    return Err(invalid(format!(
                        "Unhandled client quota entity type: {other}"
                    )))
                }
            };
            if slot.is_some() {
                return Err(invalid(format!(
                    "Invalid client quota entity, duplicate entity entry {ty}"
                )));
            }
            *slot = Some(match name {
                None => Name::Default,
                Some("") => return Err(invalid(format!("Empty {ty} not supported"))),
                Some(n) => Name::Named(n.to_string()),
            });
        }
        match (&e.user, &e.client_id, &e.ip) {
            (None, None, None) => Err(invalid("Invalid empty client quota entity".into())),
            (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(invalid(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
                    .into(),
            )),
            (_, _, Some(Name::Named(ip))) if ip.parse::<std::net::IpAddr>().is_err() => {
                Err(invalid(format!("{ip} is not a valid IP or resolvable host.")))
            }
            _ => Ok(e),
        }
    }

    fn keys(&self) -> &'static [(&'static str, Shape)] {
        match self.ip {
            Some(_) => IP_KEYS,
            None => USER_CLIENT_KEYS,
        }
    }

    /// Checks one quota value for this entity, as Kafka does.
    pub fn check(&self, key: &str, value: f64) -> Result<(), KafkaError> {
        let invalid = |why: String| KafkaError::new(ErrorCode::InvalidRequest, why);
        let Some(&(_, shape)) = self.keys().iter().find(|(k, _)| *k == key) else {
            return Err(invalid(format!("Invalid configuration key {key}")));
        };
        if let Some(why) = not_enforced(key) {
            return Err(invalid(why));
        }
        if !value.is_finite() {
            return Err(invalid(format!("Quota {key} must be a finite number")));
        }
        if value <= 0.0 {
            return Err(invalid(format!("Quota {key} must be greater than 0")));
        }
        let max = match shape {
            Shape::Double => return Ok(()),
            Shape::Int => i32::MAX as f64,
            Shape::Long => i64::MAX as f64,
        };
        if value > max {
            let ty = if shape == Shape::Int {
                "an INT"
            } else {
                "a LONG"
            };
            return Err(invalid(format!(
                "Proposed value for {key} is too large for {ty}."
            )));
        }
        if (value % 1.0).abs() > 1e-6 {
            return Err(invalid(format!("{key} cannot be a fractional value.")));
        }
        Ok(())
    }
}

/// Why a quota Kafka takes is refused here: weir does not enforce it,
/// and a limit kept but not held would mislead.
fn not_enforced(key: &str) -> Option<String> {
    let what = match key {
        "controller_mutation_rate" => "the rate of topic and partition changes (KIP-599)",
        "connection_creation_rate" => "the rate of new connections from an IP (KIP-612)",
        _ => return None,
    };
    Some(format!(
        "{key}: weir does not enforce {what}; producer_byte_rate, consumer_byte_rate and request_percentage are enforced"
    ))
}

/// A quota value. Compared bit for bit, so the catalog stays `Eq`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Value(pub f64);

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for Value {}

/// One entity's quotas, as the catalog keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientQuota {
    pub entity: Entity,
    pub values: BTreeMap<String, Value>,
}

/// One entity's changes: each key set to a value, or removed (`None`).
pub type Ops = Vec<(String, Option<f64>)>;

/// Sets (`Some`) or removes (`None`) one entity's quotas in `quotas`, all
/// or none: the first value refused refuses the entity's changes.
pub fn alter(
    quotas: &mut Vec<ClientQuota>,
    entity: &Entity,
    ops: &[(String, Option<f64>)],
) -> Result<(), KafkaError> {
    // Removing a key the entity does not have (even one it could not
    // have) changes nothing and is no error, as in Kafka.
    for (key, value) in ops {
        if let Some(v) = value {
            entity.check(key, *v)?;
        }
    }
    let at = match quotas.iter().position(|q| &q.entity == entity) {
        Some(at) => at,
        None => {
            quotas.push(ClientQuota {
                entity: entity.clone(),
                values: BTreeMap::new(),
            });
            quotas.len() - 1
        }
    };
    for (key, value) in ops {
        match value {
            Some(v) => quotas[at].values.insert(key.clone(), Value(*v)),
            None => quotas[at].values.remove(key),
        };
    }
    if quotas[at].values.is_empty() {
        quotas.remove(at);
    }
    Ok(())
}

/// The limit one request is held to: the sensor it is counted under and
/// its bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The user and client id the rate is kept for (Kafka's quota
    /// metric tags): empty where the limit is not per that part.
    pub user: String,
    pub client_id: String,
    pub bound: f64,
}

/// The limit of `kind` that applies to `user` with `client_id`, by
/// Kafka's precedence: user and client id, user and default client id,
/// user, default user and client id, both defaults, default user, client
/// id, default client id. The rate is shared as the matching entity
/// names: a limit on a user alone counts all of that user's clients
/// together; a limit on a default counts each name apart.
pub fn limit(quotas: &[ClientQuota], kind: Kind, user: &str, client_id: &str) -> Option<Limit> {
    use Name::{Default as D, Named};
    let u = || Some(Named(user.to_string()));
    let c = || Some(Named(client_id.to_string()));
    let order: [(Option<Name>, Option<Name>, bool, bool); 8] = [
        (u(), c(), true, true),
        (u(), Some(D), true, true),
        (u(), None, true, false),
        (Some(D), c(), true, true),
        (Some(D), Some(D), true, true),
        (Some(D), None, true, false),
        (None, c(), false, true),
        (None, Some(D), false, true),
    ];
    order.into_iter().find_map(|(eu, ec, by_user, by_client)| {
        let q = quotas
            .iter()
            .find(|q| q.entity.ip.is_none() && q.entity.user == eu && q.entity.client_id == ec)?;
        let bound = q.values.get(kind.key())?.0;
        Some(Limit {
            user: if by_user { user.into() } else { String::new() },
            client_id: if by_client {
                client_id.into()
            } else {
                String::new()
            },
            bound,
        })
    })
}

/// Whether any limit of `kind` is set.
pub fn any(quotas: &[ClientQuota], kind: Kind) -> bool {
    quotas.iter().any(|q| q.values.contains_key(kind.key()))
}

/// A rate over the last ten seconds, as a sliding window of 100 ms
/// buckets. Kafka keeps 11 one-second samples instead, and pads the time
/// they span with whole windows; a client it throttles steadily starts
/// its samples late, so they span less than the padded time and it runs
/// about 10% over its limit (measured here with Kafka's producer: 1.12
/// MiB/s held to 1). The sliding window holds it within about 3%, with
/// the same throttle time for the same excess and the same ten seconds'
/// allowance for a client that was idle.
#[derive(Debug, Default)]
pub struct Rate {
    /// Each bucket's index (ms / `BUCKET_MS`) and sum, oldest first.
    buckets: std::collections::VecDeque<(i64, f64)>,
}

impl Rate {
    fn purge(&mut self, now: i64) {
        let oldest = now.div_euclid(BUCKET_MS) - SPAN_MS / BUCKET_MS;
        while self.buckets.front().is_some_and(|(i, _)| *i <= oldest) {
            self.buckets.pop_front();
        }
    }

    pub fn record(&mut self, value: f64, now: i64) {
        self.purge(now);
        let i = now.div_euclid(BUCKET_MS);
        match self.buckets.back_mut() {
            Some((last, sum)) if *last >= i => *sum += value,
            _ => self.buckets.push_back((i, value)),
        }
    }

    /// Per second.
    pub fn measure(&mut self, now: i64) -> f64 {
        self.purge(now);
        let total: f64 = self.buckets.iter().map(|(_, v)| v).sum();
        total * 1000.0 / SPAN_MS as f64
    }

    /// The ms to hold the client back so its rate falls to `bound` if it
    /// records nothing more (Kafka's `QuotaUtils.throttleTime`: the excess
    /// over the bound, as a share of it, times the window); 0 within it.
    pub fn throttle(&mut self, bound: f64, now: i64) -> u32 {
        let rate = self.measure(now);
        if rate <= bound {
            return 0;
        }
        let ms = (rate - bound) / bound * SPAN_MS as f64;
        ms.round().min(i32::MAX as f64) as u32
    }

    fn last_recorded(&self) -> i64 {
        self.buckets.back().map_or(i64::MIN, |(i, _)| i * BUCKET_MS)
    }
}

/// The most a limited consumer's fetch may carry: what its bound lets it
/// read in the window (Kafka's `getMaxValueInQuotaWindow`).
pub fn max_fetch_bytes(bound: f64) -> i32 {
    (bound * SPAN_MS as f64 / 1000.0).min(i32::MAX as f64) as i32
}

/// The rates this shard owns, by what they count and whose they are.
#[derive(Default)]
pub struct Sensors {
    rates: RefCell<HashMap<(Kind, String, String), Rate>>,
    last_sweep: std::cell::Cell<i64>,
}

impl ShardState for Sensors {}

impl Sensors {
    /// Records `value` and answers the throttle time. A negative value
    /// takes back what was recorded (a throttled fetch sends no records).
    /// A request-time throttle is at most one window second, as Kafka's
    /// `ClientRequestQuotaManager` bounds it; byte rates' are not bounded.
    fn record(&self, kind: Kind, limit: &Limit, value: f64, now: i64) -> u32 {
        self.sweep(now);
        let mut rates = self.rates.borrow_mut();
        let key = (kind, limit.user.clone(), limit.client_id.clone());
        let rate = rates.entry(key).or_default();
        rate.record(value, now);
        match (value < 0.0, kind) {
            (true, _) => 0,
            (false, Kind::Request) => rate.throttle(limit.bound, now).min(MAX_REQUEST_THROTTLE_MS),
            (false, _) => rate.throttle(limit.bound, now),
        }
    }

    /// Forgets rates nothing was recorded in for their whole window, at
    /// most once a window, so a client rotating its ids costs no memory
    /// past that.
    fn sweep(&self, now: i64) {
        if now - self.last_sweep.get() < SPAN_MS {
            return;
        }
        self.last_sweep.set(now);
        self.rates
            .borrow_mut()
            .retain(|_, r| now - r.last_recorded() < SPAN_MS);
    }
}

impl Shard {
    /// Applies AlterClientQuotas' entries (each all or none) durably, on
    /// every shard before it returns; `validate_only` only checks them.
    pub async fn alter_quotas(
        self: &Rc<Self>,
        changes: Vec<(Entity, Ops)>,
        validate_only: bool,
    ) -> Vec<Result<(), KafkaError>> {
        self.change_catalog(changes.len(), move |_, cat| {
            let mut quotas = cat.quotas.clone();
            let results: Vec<_> = changes
                .iter()
                .map(|(entity, ops)| alter(&mut quotas, entity, ops))
                .collect();
            let changed = !validate_only && quotas != cat.quotas;
            if changed {
                cat.quotas = quotas;
            }
            (results, changed)
        })
        .await
    }

    /// Records `value` under `limit` on the shard that owns its sensor and
    /// answers how long to throttle the client (ms, 0 within its limit).
    pub async fn record_quota(self: &Rc<Self>, kind: Kind, limit: Limit, value: f64) -> u32 {
        let owner = crate::catalog::stable_hash(&format!(
            "{}\0{}\0{}",
            kind.key(),
            limit.user,
            limit.client_id
        )) as usize
            % self.nr_shards.max(1);
        let now = crate::clock::now_ms();
        self.invoke_on(owner, move |s| async move {
            s.state::<Sensors>().record(kind, &limit, value, now)
        })
        .await
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(user: Option<Name>, client_id: Option<Name>, key: &str, v: f64) -> ClientQuota {
        ClientQuota {
            entity: Entity {
                user,
                client_id,
                ip: None,
            },
            values: [(key.to_string(), Value(v))].into(),
        }
    }

    #[test]
    fn the_most_specific_limit_applies_and_is_counted_as_its_entity() {
        let n = |s: &str| Some(Name::Named(s.into()));
        let d = Some(Name::Default);
        let key = "producer_byte_rate";
        let quotas = vec![
            quota(None, d.clone(), key, 8.0),
            quota(None, n("c"), key, 7.0),
            quota(d.clone(), None, key, 6.0),
            quota(n("alice"), None, key, 3.0),
            quota(n("alice"), n("c"), key, 1.0),
        ];
        let got = |u: &str, c: &str| {
            limit(&quotas, Kind::Produce, u, c).map(|l| (l.bound, l.user, l.client_id))
        };
        assert_eq!(got("alice", "c"), Some((1.0, "alice".into(), "c".into())));
        assert_eq!(
            got("alice", "other"),
            Some((3.0, "alice".into(), String::new()))
        );
        assert_eq!(got("bob", "c"), Some((6.0, "bob".into(), String::new())));
        assert_eq!(limit(&quotas, Kind::Fetch, "alice", "c"), None);
        let clients_only = &quotas[..2];
        let got = |c: &str| {
            limit(clients_only, Kind::Produce, "bob", c).map(|l| (l.bound, l.user, l.client_id))
        };
        assert_eq!(got("c"), Some((7.0, String::new(), "c".into())));
        assert_eq!(got("x"), Some((8.0, String::new(), "x".into())));
    }

    #[test]
    fn entities_and_values_are_checked_as_kafka_checks_them() {
        let parse = |p: &[(&str, Option<&str>)]| Entity::parse(p.iter().copied());
        assert!(parse(&[]).is_err());
        assert!(parse(&[(USER, Some(""))]).is_err());
        assert!(parse(&[(USER, None), (USER, Some("a"))]).is_err());
        assert!(parse(&[(IP, Some("1.2.3.4")), (USER, Some("a"))]).is_err());
        assert!(parse(&[("group", Some("a"))]).is_err());
        let e = parse(&[(USER, Some("a")), (CLIENT_ID, None)]).expect("valid");
        assert!(e.check("producer_byte_rate", 1024.0).is_ok());
        assert!(e.check("producer_byte_rate", 1024.5).is_err());
        assert!(e.check("producer_byte_rate", 0.0).is_err());
        assert!(e.check("request_percentage", f64::INFINITY).is_err());
        assert!(e.check("request_percentage", 12.5).is_ok());
        assert!(e.check("connection_creation_rate", 10.0).is_err());
        let ip = parse(&[(IP, None)]).expect("valid");
        assert!(ip.check("producer_byte_rate", 10.0).is_err());
        // Kafka's, but not enforced here: refused, saying so.
        let refused = ip.check("connection_creation_rate", 10.0).unwrap_err();
        assert!(
            refused.message.contains("does not enforce"),
            "{}",
            refused.message
        );
        assert!(e.check("controller_mutation_rate", 10.0).is_err());
    }

    #[test]
    fn a_rate_throttles_by_its_excess_over_the_window() {
        let mut r = Rate::default();
        // 10 MB in the first ms: within 1 MB/s over the 10 s least window.
        r.record(10_000_000.0, 0);
        assert_eq!(r.throttle(1_000_000.0, 0), 0);
        // 1 MB more: 11 MB over 10 s is 10% over, for a tenth of the window.
        r.record(1_000_000.0, 0);
        assert_eq!(r.throttle(1_000_000.0, 0), 1000);
        // 100 ms later the first bucket is out of the window.
        assert_eq!(r.measure(10_000), 0.0);
        // A steady 1 MB/s over 10 s is within the bound.
        let mut steady = Rate::default();
        for ms in (0..20_000).step_by(10) {
            steady.record(10_000.0, ms);
        }
        assert_eq!(steady.throttle(1_000_000.0, 19_990), 0);
        steady.record(100_000.0, 19_990);
        assert_eq!(steady.throttle(1_000_000.0, 19_990), 100);
    }

    #[test]
    fn alter_sets_and_removes_all_or_none() {
        let mut quotas = Vec::new();
        let e = Entity {
            client_id: Some(Name::Named("c".into())),
            ..Entity::default()
        };
        alter(
            &mut quotas,
            &e,
            &[("producer_byte_rate".into(), Some(100.0))],
        )
        .expect("set");
        let bad = [
            ("consumer_byte_rate".to_string(), Some(5.0)),
            ("producer_byte_rate".to_string(), Some(-1.0)),
        ];
        assert!(alter(&mut quotas, &e, &bad).is_err());
        assert_eq!(quotas[0].values.len(), 1);
        alter(&mut quotas, &e, &[("producer_byte_rate".into(), None)]).expect("removed");
        assert!(quotas.is_empty());
        // Removing what is not there, even a key Kafka does not have, is no error.
        alter(&mut quotas, &e, &[("bytes_per_fortnight".into(), None)]).expect("nothing to remove");
        assert!(quotas.is_empty());
    }
}
