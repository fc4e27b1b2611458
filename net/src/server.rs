//! The listeners of one shard: Kafka on `--kafka` and HTTP on `--addr`
//! (served by `http`),
//! both bound with SO_REUSEPORT so every shard accepts its own share, and
//! with `--shard-ports` Kafka on this shard's own port too. With TLS
//! (`--tls-cert`), both ports speak it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use futures_rustls::{TlsAcceptor, TlsConnector};
use glommio::net::TcpListener;
use glommio::sync::Semaphore;
use weir_core::node::Serving;
use weir_core::Shard;

use crate::connection;

/// Binds this shard's listeners and returns the future that serves them.
/// `peer_tls`: how a cluster node's replica fetcher reaches the others'
/// Kafka ports when they speak TLS.
pub fn bind(
    shard: Rc<Shard>,
    tls: Option<TlsAcceptor>,
    peer_tls: Option<TlsConnector>,
) -> Result<Serving, String> {
    let kafka = TcpListener::bind(shard.config.kafka_addr).map_err(|e| {
        format!(
            "cannot listen for Kafka on {}: {e}",
            shard.config.kafka_addr
        )
    })?;
    let own = match shard.config.shard_listen_addr(shard.id) {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .map_err(|e| format!("cannot listen for Kafka on shard port {addr}: {e}"))?,
        ),
        None => None,
    };
    let http = TcpListener::bind(shard.config.http_addr)
        .map_err(|e| format!("cannot listen for HTTP on {}: {e}", shard.config.http_addr))?;
    // Both Kafka listeners of this shard share its connection slots.
    let slots = Rc::new(Semaphore::new(shard.config.connections_per_shard() as u64));
    Ok(Box::pin(async move {
        let http_task = glommio::spawn_local(crate::http::serve(shard.clone(), http, tls.clone()));
        // A cluster node's shard copies the partitions it follows.
        let fetcher = shard
            .cluster
            .is_some()
            .then(|| glommio::spawn_local(crate::replica_fetcher::run(shard.clone(), peer_tls)));
        let own_task = own.map(|l| {
            glommio::spawn_local(accept_kafka(shard.clone(), l, slots.clone(), tls.clone()))
        });
        let result = accept_kafka(shard, kafka, slots, tls).await;
        if let Some(t) = own_task {
            t.cancel().await;
        }
        http_task.cancel().await;
        if let Some(t) = fetcher {
            t.cancel().await;
        }
        result
    }))
}

async fn accept_kafka(
    shard: Rc<Shard>,
    listener: TcpListener,
    slots: Rc<Semaphore>,
    tls: Option<TlsAcceptor>,
) -> Result<(), String> {
    // Keep every connection's handle so shutdown can cancel them: a
    // detached task would outlive its executor.
    let live: Rc<RefCell<HashMap<u64, glommio::task::JoinHandle<()>>>> = Rc::default();
    let mut next_id = 0u64;
    let guard = CancelOnDrop(live.clone());
    let mut last_warning = None;
    let mut last_failure = None;
    loop {
        // At the limit, stop accepting (as Kafka's max.connections does):
        // new clients wait in the listen backlog until a connection ends.
        let quiet = last_warning.is_some_and(|t: std::time::Instant| t.elapsed().as_secs() < 10);
        if slots.available() == 0 && !quiet {
            last_warning = Some(std::time::Instant::now());
            log::warn!(
                "shard {}: {} Kafka connections, the limit (--max-connections): not accepting until one closes",
                shard.id,
                shard.config.connections_per_shard()
            );
        }
        let Ok(slot) = slots.acquire_static_permit(1).await else {
            return Ok(());
        };
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: said once in ten seconds.
                if last_failure.is_none_or(|t: std::time::Instant| t.elapsed().as_secs() >= 10) {
                    last_failure = Some(std::time::Instant::now());
                    log::warn!("shard {}: accept failed: {e}", shard.id);
                }
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        weir_core::counters::add(&shard.counters.connections, 1);
        let (s, l, tls) = (shard.clone(), live.clone(), tls.clone());
        let open = &shard.counters.connections_open;
        open.set(open.get() + 1);
        let handle = glommio::spawn_local(async move {
            connection::serve(s.clone(), stream, tls).await;
            let open = &s.counters.connections_open;
            open.set(open.get() - 1);
            l.borrow_mut().remove(&id);
            drop(slot);
        })
        .detach();
        live.borrow_mut().insert(id, handle);
        let _ = &guard;
    }
}

struct CancelOnDrop(Rc<RefCell<HashMap<u64, glommio::task::JoinHandle<()>>>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        for (_, h) in self.0.borrow_mut().drain() {
            h.cancel();
        }
    }
}
