//! Leader election on a Lease, with client-go's `leaderelection` semantics, so that of several
//! `skiff server`s on one shared datastore only one runs the scheduler and the controllers.
//!
//! A candidate tries every `retry_period` to take the Lease (`kube-system/
//! skiff-controller-manager` by default). It may take it when no one holds it, or when the
//! record it last saw has not changed for `lease_duration` by its *own* clock (client-go's
//! `observedTime`): the holder's `renewTime` is never compared with the local clock, so clock
//! skew between servers does not matter. Each change of holder counts one more
//! `leaseTransitions`. The leader renews every `retry_period`; if it cannot renew for
//! `renew_deadline` it has lost the Lease. Writes carry the resourceVersion read, so two
//! candidates racing for an expired Lease cannot both win.
//!
//! With the default embedded datastore there is only one server, and nothing is elected (no
//! Lease written every 2 s to the SD card): see `--leader-elect`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::coordination::Lease;
use api::meta::{MicroTime, ObjectMeta};

use crate::registry::{Part, Registry};

/// The namespace of the controllers' Lease.
pub const LEASE_NAMESPACE: &str = "kube-system";
/// The name of the controllers' Lease.
pub const LEASE_NAME: &str = "skiff-controller-manager";

/// kube-controller-manager's defaults for `--leader-elect-*`.
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    /// This candidate's identity (`holderIdentity`), unique among candidates.
    pub identity: String,
    /// How long a non-leader waits, after it last saw the Lease change, before it takes it.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives the Lease up for lost.
    pub renew_deadline: Duration,
    /// How often candidates try to take, and the leader to renew, the Lease.
    pub retry_period: Duration,
}

impl Config {
    /// The defaults (15 s, 10 s, 2 s) for `identity` on the controllers' Lease.
    pub fn new(identity: impl Into<String>) -> Config {
        Config {
            namespace: LEASE_NAMESPACE.into(),
            name: LEASE_NAME.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Kubernetes' checks of the durations (`NewLeaderElector`).
    pub fn check(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err("leaseDuration must be greater than renewDeadline".into());
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err("renewDeadline must be greater than retryPeriod*JitterFactor".into());
        }
        if self.lease_duration.is_zero()
            || self.renew_deadline.is_zero()
            || self.retry_period.is_zero()
        {
            return Err("the durations must be greater than zero".into());
        }
        if self.identity.is_empty() {
            return Err("the identity must not be empty".into());
        }
        Ok(())
    }
}

/// A server's identity for elections: its host name and a random suffix, as client-go's
/// users make it (`host_uuid`), so that a restarted server is a new candidate.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "skiff".to_string()
    } else {
        host
    };
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// One candidate.
pub struct Elector {
    registry: Registry,
    config: Config,
    /// The Lease as last read or written, and when (by this candidate's clock) its record
    /// was last seen to change: client-go's observedRecord and observedTime.
    observed: Option<(Lease, Instant)>,
    leading: Arc<AtomicBool>,
}

impl Elector {
    pub fn new(registry: Registry, config: Config) -> Result<Elector, String> {
        config.check()?;
        Ok(Elector {
            registry,
            config,
            observed: None,
            leading: Arc::new(AtomicBool::new(false)),
        })
    }

    /// A flag that is true while this candidate leads.
    pub fn leading(&self) -> Arc<AtomicBool> {
        self.leading.clone()
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|(l, _)| l.holder() == self.config.identity)
    }

    fn observe(&mut self, lease: Lease) {
        self.observed = Some((lease, Instant::now()));
    }

    /// The Lease's record as client-go's LeaderElectionRecord compares it (the spec, without
    /// the object's metadata).
    fn record_changed(&self, lease: &Lease) -> bool {
        self.observed
            .as_ref()
            .is_none_or(|(seen, _)| seen.spec != lease.spec)
    }

    /// client-go's tryAcquireOrRenew: takes or renews the Lease; true if this candidate
    /// holds it now.
    pub async fn try_acquire_or_renew(&mut self) -> bool {
        let now = MicroTime::now();
        let duration = self.config.lease_duration.as_secs().max(1) as i32;
        let current = match self
            .registry
            .get::<Lease>(&self.config.namespace, &self.config.name)
            .await
        {
            Ok(l) => l,
            Err(e) if e.code() == 404 => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: self.config.name.clone(),
                        namespace: Some(self.config.namespace.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                lease.spec.holder_identity = Some(self.config.identity.clone());
                lease.spec.lease_duration_seconds = Some(duration);
                lease.spec.acquire_time = Some(now);
                lease.spec.renew_time = Some(now);
                lease.spec.lease_transitions = Some(0);
                return match self.registry.create(lease, None).await {
                    Ok(made) => {
                        self.observe(made);
                        true
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "creating the leader lease");
                        false
                    }
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %self.config.name, "reading the leader lease");
                return false;
            }
        };
        if self.record_changed(&current) {
            self.observe(current.clone());
        } else if let Some((seen, _)) = &mut self.observed {
            // Same record: keep when it was first seen, but the newest resourceVersion.
            *seen = current.clone();
        }
        let observed_at = self.observed.as_ref().map(|(_, at)| *at);
        let held_by_other = !current.holder().is_empty() && !self.is_leader();
        let held_for = current
            .spec
            .lease_duration_seconds
            .map_or(self.config.lease_duration, |s| {
                Duration::from_secs(s.max(0) as u64)
            });
        let valid = observed_at.is_some_and(|at| at.elapsed() < held_for);
        if held_by_other && valid {
            return false;
        }
        let mut lease = current.clone();
        let transitions = current.spec.lease_transitions.unwrap_or(0);
        if self.is_leader() {
            lease.spec.acquire_time = current.spec.acquire_time;
            lease.spec.lease_transitions = Some(transitions);
        } else {
            lease.spec.acquire_time = Some(now);
            // The Lease is anyone's to write (with the rights): i32::MAX + 1 overflowed,
            // and wrapped it is a negative count validation refuses.
            lease.spec.lease_transitions = Some(transitions.saturating_add(1));
        }
        lease.spec.holder_identity = Some(self.config.identity.clone());
        lease.spec.lease_duration_seconds = Some(duration);
        lease.spec.renew_time = Some(now);
        let name = self.config.name.clone();
        match self
            .registry
            .update(lease, Some(&self.config.namespace), &name, Part::Main)
            .await
        {
            Ok(written) => {
                self.observe(written);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "writing the leader lease");
                false
            }
        }
    }

    /// Waits until this candidate holds the Lease, trying every retry period (and a little
    /// jitter).
    pub async fn acquire(&mut self) {
        loop {
            if self.try_acquire_or_renew().await {
                self.leading.store(true, Ordering::SeqCst);
                tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
                return;
            }
            smol::Timer::after(jittered(self.config.retry_period)).await;
        }
    }

    /// Renews the Lease every retry period while that succeeds within the renew deadline;
    /// returns when the Lease is lost.
    pub async fn renew(&mut self) {
        loop {
            let deadline = Instant::now() + self.config.renew_deadline;
            let renewed = loop {
                if self.try_acquire_or_renew().await {
                    break true;
                }
                if Instant::now() + self.config.retry_period > deadline {
                    break false;
                }
                smol::Timer::after(self.config.retry_period).await;
            };
            if !renewed {
                self.leading.store(false, Ordering::SeqCst);
                tracing::error!(identity = %self.config.identity, lease = %self.config.name, "leader election lost");
                return;
            }
            smol::Timer::after(self.config.retry_period).await;
        }
    }

    /// Gives the Lease up (client-go's ReleaseOnCancel): the next candidate need not wait for
    /// it to expire.
    pub async fn release(&mut self) {
        if !self.is_leader() {
            return;
        }
        self.leading.store(false, Ordering::SeqCst);
        let Some((mut lease, _)) = self.observed.take() else {
            return;
        };
        let now = MicroTime::now();
        lease.spec.holder_identity = Some(String::new());
        lease.spec.lease_duration_seconds = Some(1);
        lease.spec.acquire_time = Some(now);
        lease.spec.renew_time = Some(now);
        let name = self.config.name.clone();
        if let Err(e) = self
            .registry
            .update(lease, Some(&self.config.namespace), &name, Part::Main)
            .await
        {
            tracing::warn!(error = %e, "releasing the leader lease");
        }
    }
}

/// `period` plus up to a tenth of it, so candidates that started together do not stay in
/// step. client-go waits up to 1.2 periods more; less jitter keeps a take-over within
/// `lease_duration` + 2 retry periods of the leader's last renewal (15-20 s by default).
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    period + period.mul_f64(0.1 * f64::from(nanos % 1000) / 1000.0)
}

/// Waits to be elected, runs `start` (which starts the scheduler and the controllers), and
/// keeps the Lease; returns when it is lost. Kubernetes' controller manager and scheduler
/// then exit, and so does `skiff server`: its loops cannot be stopped one by one, and a
/// restarted server is a candidate again.
pub async fn run_while_leader(mut elector: Elector, start: impl FnOnce()) {
    elector.acquire().await;
    start();
    elector.renew().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreConfig};

    fn registry(dir: &std::path::Path) -> Registry {
        let store = Store::open(StoreConfig::in_dir(dir)).expect("store");
        Registry::new(store)
    }

    async fn make_namespace(r: &Registry) {
        let mut ns = api::core::Namespace::default();
        ns.metadata.name = LEASE_NAMESPACE.into();
        r.create(ns, None).await.expect("namespace");
    }

    async fn lease(r: &Registry) -> Lease {
        r.get(LEASE_NAMESPACE, LEASE_NAME).await.expect("lease")
    }

    #[test]
    fn durations_are_checked_as_kubernetes_does() {
        assert!(Config::new("a").check().is_ok());
        let mut c = Config::new("a");
        c.renew_deadline = c.lease_duration;
        assert!(c.check().is_err());
        let mut c = Config::new("a");
        c.retry_period = Duration::from_secs(9);
        assert!(c.check().is_err());
        assert!(Config::new("").check().is_err());
    }

    /// Two candidates on one registry: exactly one leads; once it stops renewing, the other
    /// takes over after the lease duration (by its own clock), within 15-20 s.
    #[test]
    fn one_of_two_candidates_leads_and_the_other_takes_over() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        smol::block_on(async {
            make_namespace(&r).await;
            let mut a = Elector::new(r.clone(), Config::new("server-a")).unwrap();
            let mut b = Elector::new(r.clone(), Config::new("server-b")).unwrap();
            assert!(
                a.try_acquire_or_renew().await,
                "the first candidate takes it"
            );
            assert!(!b.try_acquire_or_renew().await, "the second does not");
            let l = lease(&r).await;
            assert_eq!(l.holder(), "server-a");
            assert_eq!(l.spec.lease_duration_seconds, Some(15));
            assert_eq!(l.spec.lease_transitions, Some(0));
            assert_eq!(l.metadata.namespace(), LEASE_NAMESPACE);

            // a leads and renews in the background; b keeps trying.
            let a_leading = a.leading();
            let a_task = smol::spawn(async move {
                a.acquire().await;
                a.renew().await;
            });
            let b_leading = b.leading();
            let b_task = smol::spawn(async move {
                b.acquire().await;
            });
            smol::Timer::after(Duration::from_secs(6)).await;
            assert!(a_leading.load(Ordering::SeqCst));
            assert!(!b_leading.load(Ordering::SeqCst), "two leaders");
            assert_eq!(lease(&r).await.holder(), "server-a");
            let renewed = lease(&r).await.spec.renew_time;
            assert!(renewed > l.spec.renew_time, "the leader renews");

            // a stops renewing (a crash): b takes over after 15 s of seeing no change.
            drop(a_task);
            let stopped = Instant::now();
            b_task.await;
            let took = stopped.elapsed();
            eprintln!("server-b took over {took:?} after server-a stopped renewing");
            assert!(b_leading.load(Ordering::SeqCst));
            assert!(
                took >= Duration::from_secs(13) && took <= Duration::from_secs(20),
                "took over after {took:?}"
            );
            let l = lease(&r).await;
            assert_eq!(l.holder(), "server-b");
            assert_eq!(l.spec.lease_transitions, Some(1));
            assert!(l.spec.acquire_time > renewed);
        });
    }

    /// A leader that cannot renew within the renew deadline gives up; a released Lease is
    /// taken at once.
    #[test]
    fn a_leader_that_cannot_renew_loses_and_a_release_hands_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        smol::block_on(async {
            make_namespace(&r).await;
            let fast = |id: &str| Config {
                lease_duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry_period: Duration::from_millis(500),
                ..Config::new(id)
            };
            let mut a = Elector::new(r.clone(), fast("server-a")).unwrap();
            a.acquire().await;
            // Someone else takes the Lease over (an operator, a split brain healed): a's
            // renewals fail from then on.
            let mut l = lease(&r).await;
            l.spec.holder_identity = Some("intruder".into());
            l.spec.renew_time = Some(MicroTime::now());
            r.update(l, Some(LEASE_NAMESPACE), LEASE_NAME, Part::Main)
                .await
                .unwrap();
            let started = Instant::now();
            a.renew().await;
            assert!(!a.leading().load(Ordering::SeqCst));
            assert!(
                started.elapsed() <= Duration::from_secs(3),
                "{:?}",
                started.elapsed()
            );

            let mut b = Elector::new(r.clone(), fast("server-b")).unwrap();
            let mut c = Elector::new(r.clone(), fast("server-c")).unwrap();
            // The intruder's record is fresh for b: b waits it out, then takes over.
            assert!(!b.try_acquire_or_renew().await);
            b.acquire().await;
            assert_eq!(lease(&r).await.spec.lease_transitions, Some(1));
            b.release().await;
            let l = lease(&r).await;
            assert_eq!(l.holder(), "");
            // Released: taken at the first try, without waiting for the duration.
            assert!(c.try_acquire_or_renew().await);
            let l = lease(&r).await;
            assert_eq!(l.holder(), "server-c");
            assert_eq!(l.spec.lease_transitions, Some(2));
        });
    }

    /// A Lease is anyone's to write (with the rights): a count of i32::MAX transitions
    /// overflowed on the next takeover, in the election's task.
    #[test]
    fn the_largest_transition_count_saturates() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        smol::block_on(async {
            make_namespace(&r).await;
            let mut a = Elector::new(r.clone(), Config::new("server-a")).unwrap();
            assert!(a.try_acquire_or_renew().await);
            a.release().await;
            let mut l = lease(&r).await;
            l.spec.lease_transitions = Some(i32::MAX);
            r.update(l, Some(LEASE_NAMESPACE), LEASE_NAME, Part::Main)
                .await
                .unwrap();
            let mut b = Elector::new(r.clone(), Config::new("server-b")).unwrap();
            assert!(b.try_acquire_or_renew().await);
            let l = lease(&r).await;
            assert_eq!(l.holder(), "server-b");
            assert_eq!(l.spec.lease_transitions, Some(i32::MAX));
        });
    }
}
