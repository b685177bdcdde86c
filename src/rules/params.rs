// SPDX-License-Identifier: GPL-2.0

//! Module parameters: ranges, defaults and load-time validation.
//!
//! Pure logic: this file does not use `kernel::` and is compiled by the host test crate
//! (`tests/host`) as well as by the module. The `module!` block in `fastreg.rs` takes its
//! defaults from the [`Spec`]s here, so the documented, validated and loaded defaults are
//! one set of numbers.

use core::fmt;

/// The range and default of one integer module parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    /// Parameter name, as given to `insmod`.
    pub(crate) name: &'static str,
    /// Smallest allowed value.
    pub(crate) min: u32,
    /// Largest allowed value.
    pub(crate) max: u32,
    /// Value used when the parameter is not given.
    pub(crate) default: u32,
}

impl Spec {
    /// Checks that `value` lies in `min..=max`.
    pub(crate) fn check(&self, value: u32) -> Result<u32, ParamError> {
        if (self.min..=self.max).contains(&value) {
            Ok(value)
        } else {
            Err(ParamError::OutOfRange { spec: *self, value })
        }
    }
}

/// Fast-registration MRs allocated per device when the device is added.
pub(crate) const POOL_SIZE: Spec = Spec {
    name: "pool_size",
    min: 1,
    max: 4096,
    default: 32,
};

/// Upper bound on the fast-registration MRs of one device (the pool grows on demand).
pub(crate) const POOL_MAX: Spec = Spec {
    name: "pool_max",
    min: 1,
    max: 65536,
    default: 1024,
};

/// Seconds an idle MR beyond `pool_size` is kept before it is released.
pub(crate) const POOL_IDLE: Spec = Spec {
    name: "pool_idle",
    min: 1,
    max: 3600,
    default: 60,
};

/// Transfers in flight per connection (negotiated down to the peer's value).
pub(crate) const QUEUE_DEPTH: Spec = Spec {
    name: "queue_depth",
    min: 1,
    max: 256,
    default: 8,
};

/// Largest bulk transfer in bytes (negotiated down to the peer's value).
pub(crate) const MAX_PAYLOAD: Spec = Spec {
    name: "max_payload",
    min: 4096,
    max: 64 << 20,
    default: 1 << 20,
};

/// rdma_cm service port (TCP port space) the module listens on.
pub(crate) const PORT: Spec = Spec {
    name: "port",
    min: 1,
    max: 65535,
    default: 7471,
};

/// Seconds before an in-flight transfer is failed with a timeout.
pub(crate) const TIMEOUT: Spec = Spec {
    name: "timeout",
    min: 1,
    max: 3600,
    default: 20,
};

/// Seconds without traffic before a keepalive NOOP is sent; 0 disables keepalives.
pub(crate) const KEEPALIVE: Spec = Spec {
    name: "keepalive",
    min: 0,
    max: 3600,
    default: 10,
};

/// Connections an interface accepts at most; requests beyond it are rejected (a peer, or
/// many, cannot exhaust the node).
pub(crate) const MAX_CONNS: Spec = Spec {
    name: "max_conns",
    min: 1,
    max: 65536,
    default: 1024,
};

/// Most bytes of a transfer carried inline, in its messages, with no registration; 0
/// disables inline transfers. Negotiated down to the peer's. Messages grow to hold it
/// (`4096 + 56` bytes for the default, from a cache of exactly that size).
pub(crate) const MAX_INLINE: Spec = Spec {
    name: "max_inline",
    min: 0,
    max: 16384,
    default: 4096,
};

/// Whether a connection request must come from a privileged source port (below 1024): only
/// the kernel, or a process with `CAP_NET_BIND_SERVICE`, can bind one, so an unprivileged
/// process on a peer's address cannot pass for that peer's fastreg. 1 (the default)
/// refuses any other request; 0 accepts any source port, and with it any local user of a
/// node of the fabric as a peer (see Documentation/transport.rst, "Threat model").
pub(crate) const REQUIRE_PRIVILEGED_PORT: Spec = Spec {
    name: "require_privileged_port",
    min: 0,
    max: 1,
    default: 1,
};

/// Largest buffers one selftest run may allocate, in MiB (a local test or a console's
/// START: `(offset + size) x concurrency x peers`).
pub(crate) const TEST_MEM: Spec = Spec {
    name: "test_mem",
    min: 1,
    max: 1024,
    default: 1024,
};

/// MiB of buffers all the node's selftest runs may hold at once; 0 (the default) means an
/// eighth of the node's memory, so that no test, nor any console's, can push the node into
/// the OOM killer.
pub(crate) const TESTS_MEM: Spec = Spec {
    name: "tests_mem",
    min: 0,
    max: 1 << 20,
    default: 0,
};

/// Every parameter, in the order they are documented and reported.
pub(crate) const ALL: [Spec; 13] = [
    POOL_SIZE,
    POOL_MAX,
    POOL_IDLE,
    QUEUE_DEPTH,
    MAX_PAYLOAD,
    PORT,
    TIMEOUT,
    KEEPALIVE,
    MAX_CONNS,
    MAX_INLINE,
    REQUIRE_PRIVILEGED_PORT,
    TEST_MEM,
    TESTS_MEM,
];

/// Why a set of parameters was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamError {
    /// A value outside its parameter's range.
    OutOfRange {
        /// The parameter.
        spec: Spec,
        /// The value given.
        value: u32,
    },
    /// A value that must not exceed another parameter's value, but does.
    Exceeds {
        /// The parameter that is too large.
        spec: Spec,
        /// Its value.
        value: u32,
        /// The parameter that bounds it.
        bound: Spec,
        /// The bound's value.
        bound_value: u32,
    },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParamError::OutOfRange { spec, value } => write!(
                f,
                "invalid parameter {}={}: allowed range is {}..={}",
                spec.name, value, spec.min, spec.max
            ),
            ParamError::Exceeds {
                spec,
                value,
                bound,
                bound_value,
            } => write!(
                f,
                "invalid parameter {}={}: allowed range is {}..={} ({}={})",
                spec.name, value, spec.min, bound_value, bound.name, bound_value
            ),
        }
    }
}

/// The module parameters after validation.
///
/// # Invariants
///
/// Every field lies in the range of its [`Spec`], and `pool_size <= pool_max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// See [`POOL_SIZE`].
    pub(crate) pool_size: u32,
    /// See [`POOL_MAX`].
    pub(crate) pool_max: u32,
    /// See [`POOL_IDLE`].
    pub(crate) pool_idle: u32,
    /// See [`QUEUE_DEPTH`].
    pub(crate) queue_depth: u32,
    /// See [`MAX_PAYLOAD`].
    pub(crate) max_payload: u32,
    /// See [`PORT`].
    pub(crate) port: u16,
    /// See [`TIMEOUT`].
    pub(crate) timeout: u32,
    /// See [`KEEPALIVE`].
    pub(crate) keepalive: u32,
    /// See [`MAX_CONNS`].
    pub(crate) max_conns: u32,
    /// See [`MAX_INLINE`].
    pub(crate) max_inline: u32,
    /// See [`REQUIRE_PRIVILEGED_PORT`].
    pub(crate) require_privileged_port: bool,
    /// See [`TEST_MEM`].
    pub(crate) test_mem: u32,
    /// See [`TESTS_MEM`].
    pub(crate) tests_mem: u32,
}

impl Params {
    /// Validates raw values, given in the order of [`ALL`].
    ///
    /// Returns the first error, in that order, so the message names one parameter.
    pub(crate) fn validate(raw: [u32; 13]) -> Result<Params, ParamError> {
        let [pool_size, pool_max, pool_idle, queue_depth, max_payload, port, timeout, keepalive, max_conns, max_inline, require_privileged_port, test_mem, tests_mem] =
            raw;
        let params = Params {
            pool_size: POOL_SIZE.check(pool_size)?,
            pool_max: POOL_MAX.check(pool_max)?,
            pool_idle: POOL_IDLE.check(pool_idle)?,
            queue_depth: QUEUE_DEPTH.check(queue_depth)?,
            max_payload: MAX_PAYLOAD.check(max_payload)?,
            port: u16::try_from(PORT.check(port)?).map_err(|_| ParamError::OutOfRange {
                spec: PORT,
                value: port,
            })?,
            timeout: TIMEOUT.check(timeout)?,
            keepalive: KEEPALIVE.check(keepalive)?,
            max_conns: MAX_CONNS.check(max_conns)?,
            max_inline: MAX_INLINE.check(max_inline)?,
            require_privileged_port: REQUIRE_PRIVILEGED_PORT.check(require_privileged_port)? == 1,
            test_mem: TEST_MEM.check(test_mem)?,
            tests_mem: TESTS_MEM.check(tests_mem)?,
        };
        if params.pool_size > params.pool_max {
            return Err(ParamError::Exceeds {
                spec: POOL_SIZE,
                value: pool_size,
                bound: POOL_MAX,
                bound_value: pool_max,
            });
        }
        // INVARIANT: every field was checked against its range above, and the pool bound last.
        Ok(params)
    }

    /// The values in the order of [`ALL`], for reporting.
    pub(crate) fn values(&self) -> [u32; 13] {
        [
            self.pool_size,
            self.pool_max,
            self.pool_idle,
            self.queue_depth,
            self.max_payload,
            u32::from(self.port),
            self.timeout,
            self.keepalive,
            self.max_conns,
            self.max_inline,
            u32::from(self.require_privileged_port),
            self.test_mem,
            self.tests_mem,
        ]
    }
}

/// The parameters as `name=value` pairs, in the order of [`ALL`], separated by `sep`.
pub(crate) struct Listing<'a> {
    params: &'a Params,
    sep: &'static str,
}

impl Params {
    /// Formats the parameters as `name=value` pairs separated by `sep`.
    pub(crate) fn listing(&self, sep: &'static str) -> Listing<'_> {
        Listing { params: self, sep }
    }
}

impl fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (spec, value)) in ALL.iter().zip(self.params.values()).enumerate() {
            let sep = if i == 0 { "" } else { self.sep };
            write!(f, "{sep}{}={value}", spec.name)?;
        }
        Ok(())
    }
}
