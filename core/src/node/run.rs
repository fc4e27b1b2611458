//! One shard's life on its executor, in named steps: open (the mesh, the
//! group log, the shard and its partitions), serve (bind, then accept once
//! every shard is ready), background work (compaction, keyed snapshots),
//! the tick (heartbeat, groups, transactions, retention) and stop.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::Receivers;
use glommio::Task;

use crate::groups::Coordinator;
use crate::shard::{Shard, ShardJob, ShardParts, CATALOG_SHARD};

use super::Launch;

/// How long a request another node forwards waits for this node to have
/// the catalog the other had.
const FORWARDED_CATCH_UP: Duration = Duration::from_secs(5);

/// Ticks between looks at transactions to complete or abort (a second).
const TXN_EVERY: u64 = 10;
/// Ticks between expiries of idle transactional ids (a minute).
const TXN_EXPIRY_EVERY: u64 = 600;

/// How often each keyed table partition's rows are brought up to date and
/// checked for a due snapshot (`table::keyed`): a restart after a kill reads
/// at most about this much of the log past the newest snapshot, besides
/// `TAIL_RECORDS`.
const KEYED_SNAPSHOT_EVERY: Duration = Duration::from_secs(1);

/// Runs shard `id` from start-up to its stop.
pub(super) async fn run(id: usize, launch: Launch) {
    // Beating from the first moment (start-up included; the tick loop
    // takes over once serving): the watchdog wakes a shard that sleeps
    // through its own timer.
    launch.hearts.register(id);
    let heartbeat = {
        let (hearts, stopping) = (launch.hearts.clone(), launch.stopping.clone());
        glommio::spawn_local(async move {
            while !stopping.load(Ordering::Relaxed) {
                glommio::timer::sleep(crate::watchdog::BEAT).await;
                hearts.beat(id);
            }
        })
    };
    let (shard, mesh_tasks) = match open(id, &launch).await {
        Ok(opened) => opened,
        Err(e) => {
            let _ = launch.ready.send(Err(e));
            return;
        }
    };
    let server = match serve(&shard, &launch) {
        Ok(server) => server,
        Err(e) => {
            let _ = launch.ready.send(Err(e));
            return;
        }
    };
    let _ = launch.ready.send(Ok(id));
    // From here the shard's tick beats its heart: one timer, not two
    // unaligned ones waking an idle shard.
    heartbeat.cancel().await;
    let background = background_work(&shard);
    tick(&shard, &launch).await;
    stop(&shard, server, background, mesh_tasks).await;
    // Keep this executor until every shard has stopped. Reads of cancelled
    // tasks (a SQL scan's, a read-ahead) may still be in the kernel: their
    // buffers live while the executor does, and once it is dropped the
    // kernel may still write into memory the allocator hands to another
    // thread. After every shard's last write, nothing such a read lands on
    // is written anywhere.
    launch.stopped.fetch_add(1, Ordering::AcqRel);
    while launch.stopped.load(Ordering::Acquire) < launch.config.shards {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// Joins the mesh, opens the group log, makes the shard, starts running
/// the jobs other shards send it, and opens the partitions it owns.
async fn open(id: usize, launch: &Launch) -> Result<(Rc<Shard>, Vec<Task<()>>), String> {
    let config = &launch.config;
    let (senders, receivers) = launch
        .mesh
        .clone()
        .join()
        .await
        .map_err(|_| format!("shard {id}: joining the channel mesh failed"))?;
    weir_storage::segment::prepare_direct_io(&config.data_dir)
        .await
        .map_err(|e| e.to_string())?;
    // Before any log opens here: every log this shard opens flushes
    // through it.
    let journal = match config.journal {
        true => Some(
            weir_storage::journal::Journal::open(&config.data_dir, id, launch.journal_seq)
                .await
                .map_err(|e| format!("shard {id}: opening its journal: {e}"))?,
        ),
        false => None,
    };
    weir_storage::journal::install(journal);
    if let Some(sink) = &launch.timeline {
        crate::timeline::install(id, sink.clone());
        late_probe(launch.stopping.clone()).detach();
    }
    let groups = Coordinator::open(&config.data_dir, id, config.shards, config.groups)
        .await
        .map_err(|e| format!("shard {id}: opening the group log: {e}"))?;
    let producer_ids = match id == CATALOG_SHARD {
        true => Some(crate::producer_ids::ProducerIds::load(&config.data_dir)?),
        false => None,
    };
    let shard = Rc::new(Shard::new(ShardParts {
        id,
        config: config.clone(),
        catalog: launch.catalog.clone(),
        mesh: senders,
        stopping: launch.stopping.clone(),
        hearts: launch.hearts.clone(),
        groups,
        producer_ids,
        cluster: launch.cluster.clone(),
    }));
    crate::registry::install(&shard);
    let mesh_tasks = run_jobs(&shard, receivers);
    shard
        .open_owned_partitions(&launch.catalog)
        .await
        .map_err(|e| format!("shard {id}: opening partitions: {e}"))?;
    // Only once the catalog it started with is open: a newer one from the
    // quorum is installed over it, never beside it.
    if id == CATALOG_SHARD {
        install_cluster_catalogs(&shard);
        serve_forwarded(&shard);
    }
    Ok((shard, mesh_tasks))
}

/// In a cluster, installs on every shard each catalog the metadata quorum
/// applies on this node (the catalog shard's task, for the node's life).
fn install_cluster_catalogs(shard: &Rc<Shard>) {
    let Some(control) = shard.cluster.clone() else {
        return;
    };
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let mut catalogs = control.catalogs();
        loop {
            let cat = catalogs.borrow_and_update().clone();
            if let Err(e) = shard.install_newer(cat).await {
                // Tried again until it takes: the node serves the catalog
                // it has meanwhile.
                log::error!("installing the cluster's catalog: {e}; trying again in a second");
                glommio::timer::sleep(Duration::from_secs(1)).await;
                continue;
            }
            if catalogs.changed().await.is_err() {
                return;
            }
        }
    })
    .detach();
}

/// In a cluster, answers the requests other nodes forward to this node's
/// shards (the catalog shard's task, for the node's life).
fn serve_forwarded(shard: &Rc<Shard>) {
    use futures::StreamExt;
    let Some(control) = shard.cluster.clone() else {
        return;
    };
    let Some(mut forwarded) = control.take_forwarded() else {
        return;
    };
    let shard = shard.clone();
    glommio::spawn_local(async move {
        while let Some(f) = forwarded.next().await {
            let (shard, control) = (shard.clone(), control.clone());
            glommio::spawn_local(async move {
                // Answered on at least the catalog the asking node had (a
                // topic it just made, say), as far as it arrives in time.
                let caught_up = control.applied(f.catalog_version);
                let bound = glommio::timer::sleep(FORWARDED_CATCH_UP);
                futures::future::select(Box::pin(caught_up), Box::pin(bound)).await;
                if let Err(e) = shard.install_newer(control.latest()).await {
                    log::error!("installing the cluster's catalog: {e}");
                }
                let answer = match f.service {
                    crate::cluster::Service::Registry => {
                        crate::registry::api::handle_forwarded(&shard, &f.body).await
                    }
                    crate::cluster::Service::Sql => {
                        crate::sql::leaders::handle_forwarded(&shard, &f.body).await
                    }
                    crate::cluster::Service::Schemas => {
                        crate::registry::handle_schema_query(&shard, &f.body).await
                    }
                    crate::cluster::Service::Txn => {
                        crate::txn::remote::handle_forwarded(&shard, &f.body).await
                    }
                };
                let _ = f.answer.send(answer);
            })
            .detach();
        }
    })
    .detach();
}

/// Runs each job another shard sends this one, as a task of its own.
fn run_jobs(shard: &Rc<Shard>, mut receivers: Receivers<ShardJob>) -> Vec<Task<()>> {
    receivers
        .streams()
        .into_iter()
        .map(|(_, rx)| {
            let s = shard.clone();
            glommio::spawn_local(async move {
                while let Some(job) = rx.recv().await {
                    glommio::spawn_local(job(s.clone())).detach();
                }
            })
        })
        .collect()
}

/// Binds the shard's ports (`ServeFn`) and starts serving once every shard
/// is ready: Metadata names every shard's port, and a request may hop to
/// any shard. Clients that connect meanwhile wait in the listen backlog.
fn serve(shard: &Rc<Shard>, launch: &Launch) -> Result<Task<()>, String> {
    let serving = (launch.serve)(shard.clone())?;
    let (stopping, all_ready, id) = (launch.stopping.clone(), launch.all_ready.clone(), shard.id);
    Ok(glommio::spawn_local(async move {
        // Start-up only, so a short poll.
        while !all_ready.load(Ordering::Acquire) {
            if stopping.load(Ordering::Relaxed) {
                return;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        if let Err(e) = serving.await {
            log::error!("shard {id} stopped serving: {e}");
            stopping.store(true, Ordering::Relaxed);
        }
    }))
}

/// Compaction, and keyed tables' rows kept up to date and snapshotted, run
/// beside the requests at a tenth of their share of the core when both
/// have work (glommio's shares), yielding between batches: produce and
/// fetch latency stay as they were.
fn background_work(shard: &Rc<Shard>) -> Vec<Task<()>> {
    let config = &shard.config;
    let every_check = config.compaction_check_interval;
    let every_snapshot = every_check.min(KEYED_SNAPSHOT_EVERY);
    let cleaner = {
        let shard = shard.clone();
        in_background("compaction", async move {
            loop {
                glommio::timer::sleep(every_check).await;
                shard.compact_all().await;
            }
        })
    };
    let snapshots = {
        let shard = shard.clone();
        in_background("keyed-snapshots", async move {
            loop {
                glommio::timer::sleep(every_snapshot).await;
                crate::table::keyed::snapshot_due(&shard, false).await;
            }
        })
    };
    vec![cleaner, snapshots]
}

/// Runs `work` in a task queue of its own with a tenth of the requests'
/// shares.
fn in_background(name: &str, work: impl std::future::Future<Output = ()> + 'static) -> Task<()> {
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::Static(100),
        glommio::Latency::NotImportant,
        name,
    );
    glommio::spawn_local_into(work, queue).expect("a background task queue")
}

/// With a timeline: a 1 ms timer whose lateness is written down (`late`),
/// with what the thread did meanwhile (`/proc/thread-self/schedstat`): ran
/// (`on-cpu`: the shard's own long work), waited for a CPU (`run-queue`:
/// the machine's scheduler), or neither (it slept: a blocking call, or a
/// wake-up that came late).
fn late_probe(stopping: Arc<AtomicBool>) -> Task<()> {
    const EVERY: Duration = Duration::from_millis(1);
    glommio::spawn_local(async move {
        use std::os::unix::fs::FileExt;
        let stat = std::fs::File::open("/proc/thread-self/schedstat").ok();
        // The nanoseconds this thread has run (its CPU clock: schedstat's
        // own figure moves only at a tick or a switch), and waited on a
        // run queue (schedstat's second field).
        let sample = || -> (u64, u64) {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec for the call to fill in.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            let ran = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            let mut buf = [0u8; 96];
            let n = stat.as_ref().and_then(|f| f.read_at(&mut buf, 0).ok());
            let text = std::str::from_utf8(&buf[..n.unwrap_or(0)]).unwrap_or("");
            let queued = text.split_whitespace().nth(1).and_then(|w| w.parse().ok());
            (ran, queued.unwrap_or(0))
        };
        let mut before = sample();
        while !stopping.load(Ordering::Relaxed) {
            let due = Instant::now() + EVERY;
            glommio::timer::sleep(EVERY).await;
            let late = due.elapsed();
            let now = sample();
            let (ran, queued) = (
                now.0.saturating_sub(before.0),
                now.1.saturating_sub(before.1),
            );
            before = now;
            crate::timeline::note("late", due, late, || {
                format!("on-cpu {} us run-queue {} us", ran / 1000, queued / 1000)
            });
        }
    })
}

/// Beats the shard's heart and does its periodic work until the node
/// stops: groups' timeouts, transactions to complete or expire, retention.
async fn tick(shard: &Rc<Shard>, launch: &Launch) {
    let mut ticks = 0u64;
    let beat = crate::watchdog::BEAT;
    let retention_every =
        (launch.config.retention_check_interval.as_millis() / beat.as_millis()).max(1) as u64;
    while !launch.stopping.load(Ordering::Relaxed) {
        glommio::timer::sleep(beat).await;
        launch.hearts.beat(shard.id);
        ticks += 1;
        shard.groups.tick();
        if ticks.is_multiple_of(TXN_EVERY) {
            shard.txn_tick(ticks.is_multiple_of(TXN_EXPIRY_EVERY));
        }
        if ticks.is_multiple_of(retention_every) {
            shard.enforce_retention();
        }
        shard.maintain_isrs();
    }
}

/// Stops taking requests, then syncs what was appended and answers its
/// producers, then stops serving other shards.
async fn stop(
    shard: &Rc<Shard>,
    server: Task<()>,
    background: Vec<Task<()>>,
    mesh_tasks: Vec<Task<()>>,
) {
    server.cancel().await;
    for t in background {
        t.cancel().await;
    }
    crate::table::keyed::snapshot_due(shard, true).await;
    shard.close_all().await;
    shard.groups.close().await;
    for t in mesh_tasks {
        t.cancel().await;
    }
    log::info!("shard {} stopped", shard.id);
}
