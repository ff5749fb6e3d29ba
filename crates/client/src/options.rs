//! A client's options: the message layer's, the schedule's, identity,
//! recovery and atomic mode's, read once from the front end's variables.

use weft_net::settings::{BadSetting, Setting, Vars};
use weft_net::EndpointConfig;
use weft_wire::Cred;

/// Options of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub endpoint: EndpointConfig,
    /// Request size, order and pacing of data accesses (paper 000).
    pub schedule: crate::Schedule,
    /// Identity sent with namespace requests (the process's own by default).
    pub cred: Cred,
    /// List I/O: all of an access's pieces for one server travel in one
    /// request. Off (`WEFT_LIST_IO=0`) sends one request per piece, the
    /// baseline the non-contiguous benchmark compares against.
    pub list_io: bool,
    /// How long calls ride through a server's restart before failing
    /// (`WEFT_RECOVERY_MS`, 60 s; zero: fail at once). See [`crate::recovery`].
    pub recovery: std::time::Duration,
    /// Atomic mode's locks: what an access locks (`WEFT_LOCK_GRANULARITY`,
    /// list by default; the hint `weft_lock_granularity` per file).
    pub lock_granularity: crate::LockGranularity,
    /// How long an atomic access waits for its locks (`WEFT_LOCK_WAIT_MS`).
    pub lock_wait: std::time::Duration,
    /// Objects on this node's servers are read straight from them (on by
    /// default; `WEFT_LOCAL_READS=0` sends every read through the servers;
    /// see `file/local_reads.rs`).
    pub local_reads: bool,
}

/// The defaults: no variables read (a front end passes its own to
/// [`ClientOptions::from_vars`]).
impl Default for ClientOptions {
    fn default() -> Self {
        // The process's effective identity and supplementary groups, from
        // the kernel (never a fallback to root).
        let groups: Vec<u32> = nix::unistd::getgroups().map(|g| g.into_iter().map(|g| g.as_raw()).collect()).unwrap_or_default();
        let cred = Cred::with_groups(nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw(), &groups);
        ClientOptions {
            endpoint: EndpointConfig::default(),
            schedule: crate::Schedule::default(),
            cred,
            list_io: true,
            recovery: crate::recovery::DEFAULT_WINDOW,
            lock_granularity: crate::LockGranularity::List,
            lock_wait: std::time::Duration::from_secs(60),
            local_reads: true,
        }
    }
}

impl ClientOptions {
    /// The defaults, with the client variables that are set: read once,
    /// by the front end that makes the client (see `weft_net::settings`).
    pub fn from_vars(vars: &Vars<'_>) -> std::result::Result<Self, BadSetting> {
        let d = ClientOptions::default();
        Ok(ClientOptions {
            endpoint: EndpointConfig::from_vars(vars)?,
            schedule: crate::Schedule::from_vars(vars)?,
            list_io: vars.flag("WEFT_LIST_IO")?.unwrap_or(d.list_io),
            recovery: vars.u64("WEFT_RECOVERY_MS")?.map_or(d.recovery, std::time::Duration::from_millis),
            lock_granularity: vars.choice("WEFT_LOCK_GRANULARITY", "not file, range or list", |v| v.parse().ok())?.unwrap_or(d.lock_granularity),
            // 0 is a try-lock: granted only if free now.
            lock_wait: vars.u64("WEFT_LOCK_WAIT_MS")?.map_or(d.lock_wait, std::time::Duration::from_millis),
            local_reads: vars.flag("WEFT_LOCAL_READS")?.unwrap_or(d.local_reads),
            ..d
        })
    }

    /// These options as `weft config` shows them.
    pub fn settings(&self, vars: &Vars<'_>) -> Vec<Setting> {
        let ms = |d: std::time::Duration| format!("{} ms", d.as_millis());
        let mut all = self.endpoint.settings(vars);
        all.extend(self.schedule.settings(vars));
        all.extend([
            Setting::new(vars, "WEFT_LIST_IO", u8::from(self.list_io), "an access's pieces for one server travel in one request (0: one request a piece)"),
            Setting::new(vars, "WEFT_RECOVERY_MS", ms(self.recovery), "calls ride through a server's restart this long before failing (0: fail at once)"),
            Setting::new(vars, "WEFT_LOCK_GRANULARITY", self.lock_granularity.name(), "what atomic mode locks: file, range or list"),
            Setting::new(vars, "WEFT_LOCK_WAIT_MS", ms(self.lock_wait), "how long an atomic access waits for its locks"),
            Setting::new(vars, "WEFT_LOCAL_READS", u8::from(self.local_reads), "objects on this node's servers are read straight from them (1), or through the servers (0)"),
        ]);
        all
    }
}
