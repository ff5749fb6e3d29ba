//! The rules one connection is held to: sizes, counts, memory and
//! deadlines, with their defaults and settings.

use std::time::Duration;

/// The rules one connection is held to.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Largest payload of an eager `Request` frame (the client's eager limit).
    pub eager_limit: u32,
    /// Requests handed to the server and not yet answered; past it the
    /// connection stops reading until answers go out.
    pub max_queued: usize,
    /// `Rts` frames announced and not yet followed by their `Data`.
    pub max_pending_rts: usize,
    /// Payload bytes granted (`Cts` sent) and not yet received.
    pub rendezvous_window: u64,
    /// Most bytes of the memory budget this connection may hold.
    pub memory_share: u64,
    pub handshake_deadline: Duration,
    pub frame_deadline: Duration,
    pub send_deadline: Duration,
    /// A ready connection with nothing under way for this long is closed
    /// (clients reuse a connection idle for at most
    /// `EndpointConfig::idle_reuse`, which must stay below it).
    pub idle_timeout: Duration,
}

impl ConnLimits {
    /// The defaults, with deadlines from `WEFT_HANDSHAKE_DEADLINE_MS`,
    /// `WEFT_FRAME_DEADLINE_MS`, `WEFT_SEND_DEADLINE_MS` and
    /// `WEFT_IDLE_TIMEOUT_MS` when set.
    pub fn from_vars(vars: &crate::settings::Vars<'_>) -> Result<Self, crate::settings::BadSetting> {
        let d = ConnLimits::default();
        Ok(ConnLimits {
            handshake_deadline: vars.millis("WEFT_HANDSHAKE_DEADLINE_MS")?.unwrap_or(d.handshake_deadline),
            frame_deadline: vars.millis("WEFT_FRAME_DEADLINE_MS")?.unwrap_or(d.frame_deadline),
            send_deadline: vars.millis("WEFT_SEND_DEADLINE_MS")?.unwrap_or(d.send_deadline),
            idle_timeout: vars.millis("WEFT_IDLE_TIMEOUT_MS")?.unwrap_or(d.idle_timeout),
            ..d
        })
    }

    /// These limits as `weft config` shows them.
    pub fn settings(&self, vars: &crate::settings::Vars<'_>) -> Vec<crate::settings::Setting> {
        use crate::settings::Setting;
        let ms = |d: Duration| format!("{} ms", d.as_millis());
        vec![
            Setting::new(vars, "WEFT_HANDSHAKE_DEADLINE_MS", ms(self.handshake_deadline), "a connection's handshake must be done within this"),
            Setting::new(vars, "WEFT_FRAME_DEADLINE_MS", ms(self.frame_deadline), "a frame begun must arrive whole within this"),
            Setting::new(vars, "WEFT_SEND_DEADLINE_MS", ms(self.send_deadline), "an answer not taken by its client within this closes the connection"),
            Setting::new(vars, "WEFT_IDLE_TIMEOUT_MS", ms(self.idle_timeout), "a connection with nothing under way for this long is closed"),
        ]
    }
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            eager_limit: 64 * 1024,
            max_queued: 64,
            max_pending_rts: 64,
            rendezvous_window: 64 << 20,
            memory_share: 256 << 20,
            handshake_deadline: Duration::from_secs(5),
            frame_deadline: Duration::from_secs(30),
            send_deadline: Duration::from_secs(30),
            idle_timeout: IDLE_TIMEOUT,
        }
    }
}

/// How long a server keeps a ready connection that does nothing (5
/// minutes): far above the clients' reuse limit
/// (`crate::endpoint::IDLE_REUSE`), so a client never posts on a
/// connection the server is closing for idleness.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How the reason of a close for idleness begins (not the peer's fault).
pub const IDLE_CLOSE: &str = "idle for ";
