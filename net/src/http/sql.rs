//! `POST /sql`: statements in the body, signed in, run by
//! `weir_core::sql`; the last one's rows as a JSON array, or `{"error":
//! ...}` with the status its failure calls for.

use std::rc::Rc;

use futures::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use weir_core::sql::SqlError;
use weir_core::Shard;

use super::sign_in::sign_in;
use super::wire::{
    body_length, json_error, receive_body, refuse_large, respond, write_response, Head, Received,
};
use super::MAX_BODY_DISCARD;

/// The largest SQL body accepted.
const MAX_SQL_BODY: usize = 1 << 20;

/// Receives the statements, signs the caller in, runs them and answers.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    shard: &Rc<Shard>,
    stream: &mut S,
    head: Head,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let len = body_length(&head.text, &head.body);
    let body_len = head.body.len();
    let mut sql_body = match receive_body(
        shard,
        stream,
        len,
        head.body,
        MAX_SQL_BODY,
        peer,
        "an SQL body",
    )
    .await?
    {
        Received::Body(b) => b,
        Received::TooLarge => {
            let unread = len.min(MAX_BODY_DISCARD).saturating_sub(body_len);
            let why = format!("the SQL body is {len} bytes: the limit is {MAX_SQL_BODY} bytes");
            return refuse_large(stream, "application/json", &json_error(&why), unread).await;
        }
        Received::Busy => {
            let why = "the node's memory for requests is full: try again";
            return respond(stream, "503 Service Unavailable", &json_error(why)).await;
        }
        Received::Gone => return Ok(()),
    };
    sql_body.truncate(len);
    let Some((principal, host)) = sign_in(shard, stream, &head.text, peer).await? else {
        return Ok(());
    };
    let caller = weir_core::sql::Caller {
        principal: &principal,
        host: &host,
    };
    let (status, body) = match std::str::from_utf8(&sql_body) {
        Err(_) => ("400 Bad Request", json_error("the statement is not UTF-8")),
        Ok(sql) => match weir_core::sql::execute(shard, sql, &caller).await {
            Ok(r) => ("200 OK", r.to_json()),
            Err(SqlError::Statement(why)) => ("400 Bad Request", json_error(&why)),
            Err(SqlError::Denied(why)) => ("403 Forbidden", json_error(&why)),
            Err(SqlError::Node(why)) => {
                log::error!("SQL failed: {why}");
                ("500 Internal Server Error", json_error(&why))
            }
        },
    };
    write_response(stream, status, "application/json", &body).await?;
    stream.close().await
}
