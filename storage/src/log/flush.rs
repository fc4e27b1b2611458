//! Flushing: staged bytes written durably (O_DSYNC), flushes in flight
//! together, applied in the order prepared (`Flights`), failures and
//! retries.

use super::flights::Takeoff;
use crate::segment::align_up;
use crate::StorageError;

use super::ahead::allocate_to;
use super::*;

/// One segment's part of a flush: the staged bytes from the block at `pos`
/// (up to `end`, the segment's size then) in one direct write, and the
/// space to allocate first when the write would reach past it.
struct FlushJob {
    base: i64,
    file: std::rc::Rc<glommio::io::DmaFile>,
    buf: glommio::io::DmaBuffer,
    pos: u64,
    end: u64,
    allocate_to: Option<u64>,
}

impl PartitionLog {
    /// Makes everything appended before the call durable; returns the
    /// durable end (the high watermark of an unreplicated log). Each segment with bytes not yet handed to a flush gets one
    /// O_DSYNC direct write (its completion is its sync), and one flush
    /// covers every batch appended before it started (group commit). A
    /// partition may keep several flushes in flight: a flush prepared
    /// while another is in flight ends in padding, so the next one shares
    /// no block with it and their writes go to the device together
    /// (`segment`'s comment). A flush that would write a block an earlier
    /// one in flight writes too waits for that one to land first. Flushes
    /// count in order (`Flight`): the high watermark returned may be older
    /// than this flush's end while an earlier flush is in flight, and the
    /// flush that lands last returns it for both.
    ///
    /// `flush` returns when everything appended before the call is durable
    /// (or a flush failed); the log's own flushers (`flusher`) use
    /// `flush_timed`. Its outcome is published as theirs is: the flushers
    /// may have stopped for finding nothing left to write because this
    /// flush took it, and then the appenders it made durable hear it here.
    pub async fn flush(&self) -> Result<i64, StorageError> {
        let result = match self.flush_timed().await {
            Ok(_) => {
                self.wait_idle().await;
                self.seal_or_warn().await;
                match &self.state.borrow().failed {
                    Some(why) => Err(StorageError::Io(why.clone())),
                    None => Ok(self.durable_end()),
                }
            }
            Err(e) => Err(e),
        };
        self.publish(result.clone());
        result
    }

    /// One flush, and how long it waited and wrote (`None` when there was
    /// nothing to flush); returns when its own writes landed.
    pub(super) async fn flush_timed(&self) -> Result<(i64, Option<FlushTimes>), StorageError> {
        if let Some(journal) = &self.journal {
            return self.flush_journaled(journal).await;
        }
        // Allocate ahead no more than a segment holds.
        let segment_bytes = align_up(self.config.get().segment_bytes);
        let (id, jobs, must_wait) = {
            let mut st = self.state.borrow_mut();
            if !st.unsealed().any(|s| s.unwritten()) {
                return Ok((st.durable_offset, None));
            }
            let mut flights = self.flights.borrow_mut();
            let Takeoff { in_flight, pad } = flights.takeoff();
            let retry = st.failed.is_some();
            // A retry writes again what void flights may still be writing.
            let mut must_wait = retry && in_flight;
            let mut jobs: Vec<_> = st
                .unsealed_mut()
                .filter(|s| s.unwritten())
                .map(|s| {
                    must_wait |= in_flight && s.shares_block();
                    let (buf, pos, end) = s.prepare_flush(pad);
                    // Zeroing ahead raises `allocated` with `zeroed`.
                    let allocate_to = allocate_to(end, s.allocated(), segment_bytes);
                    FlushJob {
                        base: s.base(),
                        file: s.file().clone(),
                        buf,
                        pos,
                        end,
                        allocate_to,
                    }
                })
                .collect();
            jobs.reverse(); // oldest segment first
            let ends = jobs.iter().map(|j| (j.base, j.end)).collect();
            let id = flights.prepare(st.next_offset, ends, retry);
            (id, jobs, must_wait)
        };
        let t0 = std::time::Instant::now();
        if must_wait {
            self.wait_for_earlier(id).await;
        }
        let t1 = std::time::Instant::now();
        let mut zeros_wait = std::time::Duration::ZERO;
        let bytes = jobs.iter().map(|j| j.buf.len() as u64).sum();
        self.last_flush_bytes.set(bytes);
        for FlushJob {
            base,
            file,
            buf,
            pos,
            end,
            allocate_to,
        } in jobs
        {
            if let Some(to) = allocate_to {
                self.allocate_ahead(base, &file, to).await;
            }
            let z = std::time::Instant::now();
            self.wait_for_zeros(base, end).await;
            zeros_wait += z.elapsed();
            // After a failure (a short write too) nothing of this flush
            // counts as written: the next flush writes it all again.
            if let Err(why) = write_whole(&file, buf, pos).await {
                return Err(self.flight_failed(
                    id,
                    format!("writing segment {base} in {}: {why}", self.dir.display()),
                ));
            }
        }
        let times = FlushTimes {
            wait: (t1 - t0) + zeros_wait,
            write: t1.elapsed().saturating_sub(zeros_wait),
        };
        self.note_flush(t0, &times, bytes);
        self.flight_landed(id);
        Ok((self.durable_end(), Some(times)))
    }

    /// Puts a slow flush on the node's timeline (`crate::timeline`).
    pub(super) fn note_flush(&self, started: std::time::Instant, times: &FlushTimes, bytes: u64) {
        crate::timeline::note("flush_wait", started, times.wait, || {
            format!("{} {bytes} bytes", self.dir.display())
        });
        crate::timeline::note("flush_write", started + times.wait, times.write, || {
            format!("{} {bytes} bytes", self.dir.display())
        });
    }

    /// Waits until every flight prepared before `id` has landed (or failed).
    pub(super) async fn wait_for_earlier(&self, id: u64) {
        let rx = self.flights.borrow_mut().wait_for_earlier(id);
        if let Some(rx) = rx {
            let _ = rx.await;
        }
    }

    /// Waits until no flush is in flight.
    pub(super) async fn wait_idle(&self) {
        let id = self.flights.borrow().next_id();
        self.wait_for_earlier(id).await;
    }

    /// A flight's writes landed: it, and the landed flights after it,
    /// are applied once nothing before them is in flight.
    pub(super) fn flight_landed(&self, id: u64) {
        self.flights
            .borrow_mut()
            .landed(id, &mut self.state.borrow_mut());
    }

    /// A flight's write failed: the log is failed (appends are refused
    /// until a flush works), the flights prepared after it apply nothing,
    /// and every byte not durable is written again by the next flush.
    pub(super) fn flight_failed(&self, id: u64, why: String) -> StorageError {
        let err = self.fail(why);
        let mut st = self.state.borrow_mut();
        self.flights.borrow_mut().failed(id, &mut st);
        for seg in st.unsealed_mut() {
            seg.flush_failed();
        }
        err
    }

    /// Marks the log failed (appends refused until a flush works).
    pub(super) fn fail(&self, why: String) -> StorageError {
        // A full disk fails every retry the same way: said once at error
        // level, until a flush works again.
        let again = self.state.borrow().failed.as_ref() == Some(&why);
        let level = if again {
            log::Level::Debug
        } else {
            log::Level::Error
        };
        log::log!(level, "{why}");
        self.state.borrow_mut().failed = Some(why.clone());
        StorageError::Io(why)
    }
}
