//! Per-stream bookkeeping shared by both sessions: ids, directions, byte and
//! retransmit counts, the omit snapshot, and the results document built from
//! them.
//!
//! Contract: the table is created once the stream count is known
//! (`StreamTable::new`), counts are added with `record`, `end_omit` is called
//! once when the omit period ends, and `results` / `check_peer` are used at
//! the results exchange. No method panics on a bad id; it returns `false` or
//! an error.

use std::time::Duration;

use super::proto::{Results, StreamResult};
use super::{EndReport, Error};

/// A stream's id as iperf3 numbers them: 1, 3, 4, 5, ... in creation order
/// (iperf3's `iperf_add_stream` skips 2, and both sides must agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u32);

impl StreamId {
    /// The id of the `index`-th stream created (0-based).
    pub fn from_index(index: u32) -> StreamId {
        StreamId(if index == 0 {
            1
        } else {
            index.saturating_add(2)
        })
    }
}

/// Direction of a data connection, seen from this side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// This side writes test data on it.
    Send,
    /// This side reads test data from it.
    Receive,
}

/// A data connection as the caller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub id: StreamId,
    pub role: Role,
}

/// Counters of one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamStats {
    pub id: StreamId,
    pub role: Role,
    /// Every byte recorded, omitted period included.
    pub total_bytes: u64,
    /// Bytes recorded during the omit period.
    pub omitted_bytes: u64,
    /// Retransmits, omitted period included, if the caller counted them
    /// (the results take [`StreamStats::counted_retransmits`]).
    retransmits: Option<u64>,
    /// Of those, the ones counted during the omit period.
    omitted_retransmits: u64,
}

impl StreamStats {
    /// Bytes that count for the results (omit period excluded).
    pub fn counted_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.omitted_bytes)
    }

    /// Retransmits that count for the results (omit period excluded, as
    /// iperf3 resets its count when the omitted seconds end), if the
    /// caller counted any.
    pub fn counted_retransmits(&self) -> Option<u64> {
        self.retransmits
            .map(|r| r.saturating_sub(self.omitted_retransmits))
    }
}

#[derive(Debug, Default)]
pub(crate) struct StreamTable {
    pub(crate) streams: Vec<StreamStats>,
    pub(crate) omitting: bool,
}

impl StreamTable {
    /// `parallel` streams per direction. Creation order: the client creates
    /// its sending streams first in a bidirectional test; the server accepts
    /// its receiving streams first. So the first `parallel` streams send on
    /// a client of a test that is not reversed and on a server of one that
    /// is (`is_client`, `reverse`), and receive otherwise; with `bidir` the
    /// second `parallel` do the other.
    pub(crate) fn new(parallel: u32, reverse: bool, bidir: bool, is_client: bool) -> Self {
        let count = if bidir {
            parallel.saturating_mul(2)
        } else {
            parallel
        };
        let (first, second) = match (is_client, reverse) {
            (true, false) | (false, true) => (Role::Send, Role::Receive),
            (true, true) | (false, false) => (Role::Receive, Role::Send),
        };
        let streams = (0..count)
            .map(|i| StreamStats {
                id: StreamId::from_index(i),
                role: if bidir && i >= parallel {
                    second
                } else {
                    first
                },
                total_bytes: 0,
                omitted_bytes: 0,
                retransmits: None,
                omitted_retransmits: 0,
            })
            .collect();
        StreamTable {
            streams,
            omitting: false,
        }
    }

    /// O(1): ids map back to creation indexes (1 → 0, n ≥ 3 → n - 2).
    pub(crate) fn get_mut(&mut self, id: StreamId) -> Option<&mut StreamStats> {
        let index = match id.0 {
            1 => 0,
            n if n >= 3 => (n - 2) as usize,
            _ => return None,
        };
        self.streams.get_mut(index).filter(|s| s.id == id)
    }

    pub(crate) fn record(&mut self, id: StreamId, len: u64) -> bool {
        let omitting = self.omitting;
        match self.get_mut(id) {
            Some(s) => {
                s.total_bytes = s.total_bytes.saturating_add(len);
                if omitting {
                    s.omitted_bytes = s.total_bytes;
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn add_retransmits(&mut self, id: StreamId, count: u64) -> bool {
        let omitting = self.omitting;
        match self.get_mut(id) {
            Some(s) => {
                let r = s.retransmits.unwrap_or(0).saturating_add(count);
                s.retransmits = Some(r);
                if omitting {
                    s.omitted_retransmits = r;
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn end_omit(&mut self) {
        self.omitting = false;
    }

    pub(crate) fn total(&self, role: Role) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .fold(0u64, |a, s| a.saturating_add(s.counted_bytes()))
    }

    /// Bytes of `role`'s streams, the omitted seconds' included.
    pub(crate) fn total_with_omitted(&self, role: Role) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .fold(0u64, |a, s| a.saturating_add(s.total_bytes))
    }

    pub(crate) fn all_bytes(&self) -> u64 {
        self.streams
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.total_bytes))
    }

    /// This side's results document.
    pub(crate) fn results(&self, report: &EndReport, elapsed: Duration) -> Results {
        let only_receives = self.streams.iter().all(|s| s.role == Role::Receive);
        let sender_has_retransmits = if only_receives {
            -1
        } else {
            i64::from(report.sender_has_retransmits)
        };
        let streams = self
            .streams
            .iter()
            .map(|s| StreamResult {
                id: s.id.0,
                bytes: s.counted_bytes(),
                retransmits: if s.role == Role::Send && report.sender_has_retransmits {
                    i64::try_from(s.counted_retransmits().unwrap_or(0)).unwrap_or(i64::MAX)
                } else {
                    -1
                },
                jitter: 0.0,
                errors: 0,
                packets: 0,
                start_time: Some(0.0),
                end_time: Some(elapsed.as_secs_f64()),
            })
            .collect();
        Results {
            cpu_util_total: report.cpu_util_total,
            cpu_util_user: report.cpu_util_user,
            cpu_util_system: report.cpu_util_system,
            sender_has_retransmits,
            congestion_used: report.congestion_used.clone(),
            streams,
            server_output_text: None,
            server_output_json: None,
        }
    }

    /// The peer's results must name only streams of this test (iperf3 fails
    /// the test with `IESTREAMID` otherwise).
    pub(crate) fn check_peer(&self, peer: &Results) -> Result<(), Error> {
        for s in &peer.streams {
            if !self.streams.iter().any(|m| m.id.0 == s.id) {
                return Err(Error::UnknownStream(s.id));
            }
        }
        Ok(())
    }
}
