//! ApiVersions (key 18): the APIs and versions this node serves.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use super::SERVED;

pub const MIN: i16 = 0;
pub const MAX: i16 = 4;

pub fn handle(_req: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    response(0)
}

/// The full list with an error code (UNSUPPORTED_VERSION is answered with
/// the same list, encoded as v0).
pub fn response(error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            SERVED
                .iter()
                .map(|&(k, min, max)| {
                    ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        )
}
