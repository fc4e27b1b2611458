//! DescribeClientQuotas (key 48): the quotas of the entities a filter
//! matches, as Kafka's `ClientQuotasImage.describe` matches them. Needs
//! DESCRIBE_CONFIGS on the cluster.

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::quota::{ClientQuota, Entity, Name, CLIENT_ID, IP, USER};
use weir_core::{ErrorCode, KafkaError};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

/// What one entity type must be: that name or the default (`Exact`), or
/// any (`Specified`).
enum Want {
    Exact(Name),
    Specified,
}

pub async fn handle(
    cx: &RequestContext,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let failed = |e: KafkaError| {
        DescribeClientQuotasResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(str(&e.message)))
            .with_entries(None)
    };
    if !cx.caller.may(
        &cx.shard,
        Operation::DescribeConfigs,
        ResourceType::Cluster,
        CLUSTER,
    ) {
        return failed(KafkaError::new(
            ErrorCode::ClusterAuthorizationFailed,
            format!("{} may not describe client quotas", cx.caller.principal),
        ));
    }
    let filter = match filter(&req) {
        Ok(f) => f,
        Err(e) => return failed(e),
    };
    let catalog = cx.shard.catalog();
    let entries = catalog
        .quotas
        .iter()
        .filter(|q| matches(&q.entity, &filter, req.strict))
        .map(entry)
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

/// The filter's components by entity type, checked as Kafka checks them.
fn filter(req: &DescribeClientQuotasRequest) -> Result<Vec<(&'static str, Want)>, KafkaError> {
    let invalid = |why: String| Err(KafkaError::new(ErrorCode::InvalidRequest, why));
    let mut wanted: Vec<(&'static str, Want)> = Vec::new();
    for c in &req.components {
        let ty = match c.entity_type.as_str() {
            "" => return invalid("Invalid empty entity type.".into()),
            USER => USER,
            CLIENT_ID => CLIENT_ID,
            IP => IP,
            other => {
                return Err(KafkaError::new(
                    ErrorCode::UnsupportedVersion,
                    format!("Unsupported entity type {other}"),
                ))
            }
        };
        if wanted.iter().any(|(t, _)| *t == ty) {
            return invalid(format!(
                "Entity type {ty} cannot appear more than once in the filter."
            ));
        }
        let name = c._match.as_ref().map(|m| m.to_string());
        let want =
            match (c.match_type, name) {
                (0, Some(n)) => Want::Exact(Name::Named(n)),
                (0, None) => {
                    return invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    )
                }
                (1, None) => Want::Exact(Name::Default),
                (1, Some(_)) => {
                    return invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                            .into(),
                    )
                }
                (2, None) => Want::Specified,
                (2, Some(_)) => return invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ),
                (other, _) => return invalid(format!("Unknown match type {other}")),
            };
        wanted.push((ty, want));
    }
    let has = |ty: &str| wanted.iter().any(|(t, _)| *t == ty);
    if has(IP) && (has(USER) || has(CLIENT_ID)) {
        return invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component."
                .into(),
        );
    }
    Ok(wanted)
}

fn matches(entity: &Entity, filter: &[(&str, Want)], strict: bool) -> bool {
    if strict && entity.parts().len() != filter.len() {
        return false;
    }
    filter.iter().all(|(ty, want)| {
        let name = match *ty {
            USER => &entity.user,
            CLIENT_ID => &entity.client_id,
            _ => &entity.ip,
        };
        match (want, name) {
            (_, None) => false,
            (Want::Specified, Some(_)) => true,
            (Want::Exact(w), Some(n)) => w == n,
        }
    })
}

fn entry(q: &ClientQuota) -> EntryData {
    EntryData::default()
        .with_entity(
            q.entity
                .parts()
                .into_iter()
                .map(|(ty, name)| {
                    EntityData::default()
                        .with_entity_type(str(ty))
                        .with_entity_name(name.map(str))
                })
                .collect(),
        )
        .with_values(
            q.values
                .iter()
                .map(|(k, v)| ValueData::default().with_key(str(k)).with_value(v.0))
                .collect(),
        )
}
