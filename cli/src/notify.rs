//! systemd's readiness protocol (`Type=notify`) for `xtcp serve`, through
//! the `sd-notify` crate: `READY=1` once the endpoint accepts tests (after
//! the privilege drop), `STATUS=` with each reload's result (a failed one
//! shows in `systemctl status`), `STOPPING=1` once it begins to shut down
//! after that. Nothing is sent unless `NOTIFY_SOCKET` is set (the crate checks);
//! a failure to send is logged, never fatal. `NOTIFY_SOCKET` must be a
//! path (systemd's is): the crate does not take abstract (`@…`) addresses.
//!
//! The datagram is sent from a socket made for it each time, after the
//! privilege drop: the notification socket must be writable by the user
//! xtcp runs as (systemd's `/run/systemd/notify` is writable by all).

use sd_notify::NotifyState;

/// The notifications of one run; each is sent at most once.
#[derive(Debug, Default)]
pub struct Notifier {
    /// The status READY=1 was sent with.
    ready: Option<String>,
    stopping: bool,
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        let to = std::env::var_os("NOTIFY_SOCKET").unwrap_or_default();
        tracing::warn!(
            "telling the service manager {states:?} through NOTIFY_SOCKET={} failed: {e}",
            to.to_string_lossy()
        );
    }
}

impl Notifier {
    /// `READY=1`, with `status` as the unit's status text.
    pub fn ready(&mut self, status: &str) {
        if self.ready.is_none() {
            self.ready = Some(status.to_owned());
            send(&[NotifyState::Ready, NotifyState::Status(status)]);
        }
    }

    /// The ready status with `note` after it (a reload's result), once
    /// READY=1 was sent.
    pub fn note(&mut self, note: &str) {
        if let Some(ready) = self.ready.as_ref().filter(|_| !self.stopping) {
            send(&[NotifyState::Status(&format!("{ready}; {note}"))]);
        }
    }

    /// `STOPPING=1`, once READY=1 was sent (a start that failed is an
    /// exit, which the service manager sees for itself).
    pub fn stopping(&mut self) {
        if self.ready.is_some() && !std::mem::replace(&mut self.stopping, true) {
            send(&[NotifyState::Stopping]);
        }
    }
}
