//! The arithmetic of Kubernetes' horizontal pod autoscaler (issue 16 part 6, first piece):
//! the replica calculator for resource utilisation (tolerance, missing metrics, unready
//! pods) and the normalisation of a recommendation (stabilisation windows, scaling
//! policies with their periods, min/max). Pure functions over plain inputs, with times in
//! seconds, so the controller that will feed them from the metrics and the scale
//! subresource stays thin and these rules are tested on their own.

use std::collections::VecDeque;

/// Kubernetes' default tolerance: no scaling while the usage ratio is within 10% of 1.
pub const TOLERANCE: f64 = 0.1;
/// Kubernetes' default scale-down stabilisation window
/// (--horizontal-pod-autoscaler-downscale-stabilization).
pub const DOWNSCALE_STABILIZATION_SECONDS: i64 = 300;

/// What the calculator knows of one pod of the target.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSample {
    pub name: String,
    /// Ready condition True.
    pub ready: bool,
    /// Being deleted, or failed: not counted at all.
    pub gone: bool,
    /// The sum of the containers' requests of the resource, in thousandths; None when a
    /// container requests none (utilisation cannot be computed).
    pub request: Option<i64>,
    /// The measured usage, in thousandths; None when the metrics have no sample.
    pub usage: Option<i64>,
}

/// The calculator's answer: replicas and the current utilisation (percent of requests) it
/// measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recommendation {
    pub replicas: i32,
    pub utilization: i32,
}

fn ratio(samples: &[(i64, i64)], target: i32) -> (f64, i32) {
    let (usage, request): (i64, i64) = samples
        .iter()
        .fold((0, 0), |(u, r), (su, sr)| (u + su, r + sr));
    if request == 0 {
        return (0.0, 0);
    }
    let utilization = (usage * 100 / request) as i32;
    (utilization as f64 / target as f64, utilization)
}

/// Kubernetes' GetResourceReplicas: the replicas that bring the average utilisation of the
/// pods' requests to `target` percent. Err carries the reason as Kubernetes words it.
pub fn resource_replicas(
    resource: &str,
    current: i32,
    target: i32,
    pods: &[PodSample],
    tolerance: f64,
) -> Result<Recommendation, String> {
    let live: Vec<&PodSample> = pods.iter().filter(|p| !p.gone).collect();
    if live.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let mut requests = Vec::new();
    for p in &live {
        match p.request {
            Some(r) if r > 0 => requests.push(r),
            _ => return Err(format!("missing request for {resource} in pod {}", p.name)),
        }
    }
    let ready: Vec<(i64, i64)> = live
        .iter()
        .filter(|p| p.ready)
        .filter_map(|p| Some((p.usage?, p.request?)))
        .collect();
    let unready: Vec<&&PodSample> = live.iter().filter(|p| !p.ready).collect();
    let missing: Vec<&&PodSample> = live
        .iter()
        .filter(|p| p.ready && p.usage.is_none())
        .collect();
    if ready.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let (usage_ratio, utilization) = ratio(&ready, target);
    let scale_up_with_unready = !unready.is_empty() && usage_ratio > 1.0;
    if !scale_up_with_unready && missing.is_empty() {
        if (1.0 - usage_ratio).abs() <= tolerance {
            return Ok(Recommendation {
                replicas: current,
                utilization,
            });
        }
        return Ok(Recommendation {
            replicas: (usage_ratio * ready.len() as f64).ceil() as i32,
            utilization,
        });
    }
    // Missing metrics count as 100% of the request on a scale-down and 0% on a scale-up;
    // unready pods as 0% on a scale-up: both damp the change.
    let mut all = ready.clone();
    for p in &missing {
        let r = p.request.unwrap_or(0);
        if usage_ratio < 1.0 {
            all.push((r, r));
        } else if usage_ratio > 1.0 {
            all.push((0, r));
        }
    }
    if scale_up_with_unready {
        for p in &unready {
            all.push((0, p.request.unwrap_or(0)));
        }
    }
    let (new_ratio, _) = ratio(&all, target);
    if (1.0 - new_ratio).abs() <= tolerance
        || (usage_ratio < 1.0 && new_ratio > 1.0)
        || (usage_ratio > 1.0 && new_ratio < 1.0)
    {
        return Ok(Recommendation {
            replicas: current,
            utilization,
        });
    }
    let replicas = (new_ratio * all.len() as f64).ceil() as i32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return Ok(Recommendation {
            replicas: current,
            utilization,
        });
    }
    Ok(Recommendation {
        replicas,
        utilization,
    })
}

/// autoscaling/v2 HPAScalingPolicy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Pods or Percent.
    pub type_: String,
    pub value: i32,
    pub period_seconds: i64,
}

/// autoscaling/v2 HPAScalingRules.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    pub stabilization_window_seconds: i64,
    /// Max, Min or Disabled.
    pub select_policy: String,
    pub policies: Vec<Policy>,
}

impl Rules {
    /// Kubernetes' default scale-up rules: no window, the larger of 4 pods or 100% per 15 s.
    pub fn default_up() -> Rules {
        Rules {
            stabilization_window_seconds: 0,
            select_policy: "Max".into(),
            policies: vec![
                Policy {
                    type_: "Pods".into(),
                    value: 4,
                    period_seconds: 15,
                },
                Policy {
                    type_: "Percent".into(),
                    value: 100,
                    period_seconds: 15,
                },
            ],
        }
    }

    /// Kubernetes' default scale-down rules: the stabilisation window, then up to 100% per
    /// 15 s.
    pub fn default_down(window_seconds: i64) -> Rules {
        Rules {
            stabilization_window_seconds: window_seconds,
            select_policy: "Max".into(),
            policies: vec![Policy {
                type_: "Percent".into(),
                value: 100,
                period_seconds: 15,
            }],
        }
    }
}

/// Why the normalised replicas differ from the recommendation (the ScalingLimited
/// condition's reason and message).
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    pub reason: &'static str,
    pub message: &'static str,
}

const WITHIN: Limit = Limit {
    reason: "DesiredWithinRange",
    message: "the desired count is within the acceptable range",
};

/// One autoscaler's memory: its recent recommendations and scale events (seconds, value).
#[derive(Clone, Debug, Default)]
pub struct History {
    recommendations: VecDeque<(i64, i32)>,
    up_events: VecDeque<(i64, i32)>,
    down_events: VecDeque<(i64, i32)>,
}

fn changed_in_period(events: &VecDeque<(i64, i32)>, now: i64, period: i64) -> i32 {
    events
        .iter()
        .filter(|(t, _)| *t > now - period)
        .map(|(_, n)| n)
        .sum()
}

impl History {
    /// Records a scale from `from` to `to` replicas at `now`.
    pub fn record_scale(&mut self, now: i64, from: i32, to: i32) {
        if to > from {
            self.up_events.push_back((now, to - from));
        } else if to < from {
            self.down_events.push_back((now, from - to));
        }
    }

    fn scale_up_limit(&self, current: i32, rules: &Rules, now: i64) -> i32 {
        if rules.select_policy == "Disabled" {
            return current;
        }
        let min = rules.select_policy == "Min";
        let mut result = if min { i32::MAX } else { i32::MIN };
        for p in &rules.policies {
            let start = current - changed_in_period(&self.up_events, now, p.period_seconds)
                + changed_in_period(&self.down_events, now, p.period_seconds);
            let proposed = if p.type_ == "Pods" {
                start + p.value
            } else {
                (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i32
            };
            result = if min {
                result.min(proposed)
            } else {
                result.max(proposed)
            };
        }
        result
    }

    fn scale_down_limit(&self, current: i32, rules: &Rules, now: i64) -> i32 {
        if rules.select_policy == "Disabled" {
            return current;
        }
        let min = rules.select_policy == "Min";
        let mut result = if min { i32::MIN } else { i32::MAX };
        for p in &rules.policies {
            let start = current - changed_in_period(&self.up_events, now, p.period_seconds)
                + changed_in_period(&self.down_events, now, p.period_seconds);
            let proposed = if p.type_ == "Pods" {
                start - p.value
            } else {
                (start as f64 * (1.0 - p.value as f64 / 100.0)) as i32
            };
            result = if min {
                result.max(proposed)
            } else {
                result.min(proposed)
            };
        }
        result
    }

    /// Kubernetes' normalizeDesiredReplicasWithBehaviors: the stabilised recommendation
    /// (the lowest of the scale-up window, the highest of the scale-down window), then the
    /// rate limits of the policies and min/max. Remembers `desired` at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn normalize(
        &mut self,
        now: i64,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        up: &Rules,
        down: &Rules,
    ) -> (i32, Limit) {
        let (up_cut, down_cut) = (
            now - up.stabilization_window_seconds,
            now - down.stabilization_window_seconds,
        );
        let (mut up_rec, mut down_rec) = (desired, desired);
        for (t, r) in &self.recommendations {
            if *t > up_cut {
                up_rec = up_rec.min(*r);
            }
            if *t > down_cut {
                down_rec = down_rec.max(*r);
            }
        }
        let mut stabilized = current.max(up_rec);
        stabilized = stabilized.min(down_rec);
        self.recommendations.push_back((now, desired));
        let keep = up
            .stabilization_window_seconds
            .max(down.stabilization_window_seconds);
        while self
            .recommendations
            .front()
            .is_some_and(|(t, _)| *t <= now - keep)
        {
            self.recommendations.pop_front();
        }
        let longest = up
            .policies
            .iter()
            .chain(&down.policies)
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0);
        for q in [&mut self.up_events, &mut self.down_events] {
            while q.front().is_some_and(|(t, _)| *t <= now - longest) {
                q.pop_front();
            }
        }
        if stabilized > current {
            let limit = self.scale_up_limit(current, up, now).max(current);
            let (allowed, why) = if max > limit {
                (
                    limit,
                    Limit {
                        reason: "ScaleUpLimit",
                        message: "the desired replica count is increasing faster than the maximum scale rate",
                    },
                )
            } else {
                (
                    max,
                    Limit {
                        reason: "TooManyReplicas",
                        message: "the desired replica count is more than the maximum replica count",
                    },
                )
            };
            if stabilized > allowed {
                return (allowed, why);
            }
        } else if stabilized < current {
            let limit = self.scale_down_limit(current, down, now).min(current);
            let (allowed, why) = if min < limit {
                (
                    limit,
                    Limit {
                        reason: "ScaleDownLimit",
                        message: "the desired replica count is decreasing faster than the maximum scale rate",
                    },
                )
            } else {
                (
                    min,
                    Limit {
                        reason: "TooFewReplicas",
                        message: "the desired replica count is less than the minimum replica count",
                    },
                )
            };
            if stabilized < allowed {
                return (allowed, why);
            }
        }
        (stabilized, WITHIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ready: bool, request: i64, usage: Option<i64>) -> PodSample {
        PodSample {
            name: "p".into(),
            ready,
            gone: false,
            request: Some(request),
            usage,
        }
    }

    #[test]
    fn utilisation_tolerance_and_ceiling() {
        // 2 pods at 90% of 100m against 50%: ceil(1.8 * 2) = 4.
        let pods = [pod(true, 100, Some(90)), pod(true, 100, Some(90))];
        let r = resource_replicas("cpu", 2, 50, &pods, TOLERANCE).unwrap();
        assert_eq!(
            r,
            Recommendation {
                replicas: 4,
                utilization: 90
            }
        );
        // 54% against 50% is within the 10% tolerance.
        let pods = [pod(true, 100, Some(54)), pod(true, 100, Some(54))];
        assert_eq!(
            resource_replicas("cpu", 2, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            2
        );
        // Idle: 1% -> ceil(0.02 * 4) = 1.
        let pods = vec![pod(true, 100, Some(1)); 4];
        assert_eq!(
            resource_replicas("cpu", 4, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            1
        );
    }

    #[test]
    fn missing_metrics_and_unready_pods_damp_the_change() {
        // Scale up with an unready pod: it counts as 0%, (60+60+0)/300 = 40% against 50%
        // crosses back below the target, so no scale-up at all (ready pods alone: 60%).
        let pods = [
            pod(true, 100, Some(60)),
            pod(true, 100, Some(60)),
            pod(false, 100, None),
        ];
        assert_eq!(
            resource_replicas("cpu", 3, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            3
        );
        // Scale down with a pod without metrics: it counts as 100%, (10+10+100)/300 = 40%
        // vs 50% -> ceil(0.8 * 3) = 3.
        let pods = [
            pod(true, 100, Some(10)),
            pod(true, 100, Some(10)),
            pod(true, 100, None),
        ];
        assert_eq!(
            resource_replicas("cpu", 3, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            3
        );
        // No metrics at all.
        let pods = [pod(false, 100, None)];
        assert_eq!(
            resource_replicas("cpu", 1, 50, &pods, TOLERANCE).unwrap_err(),
            "did not receive metrics for targeted pods (pods might be unready)"
        );
    }

    #[test]
    fn stabilisation_window_and_rate_limits() {
        let up = Rules::default_up();
        let down = Rules::default_down(60);
        let mut h = History::default();
        // Scale-up is limited to max(4 pods, 100%) per 15 s: 1 -> 5 at most.
        let (n, why) = h.normalize(0, 1, 20, 1, 10, &up, &down);
        assert_eq!((n, why.reason), (5, "ScaleUpLimit"));
        h.record_scale(0, 1, 5);
        // Within the same 15 s, nothing more.
        let (n, _) = h.normalize(5, 5, 20, 1, 10, &up, &down);
        assert_eq!(n, 5);
        // Later, up to the max.
        let (n, why) = h.normalize(20, 5, 20, 1, 10, &up, &down);
        assert_eq!((n, why.reason), (10, "TooManyReplicas"));
        h.record_scale(20, 5, 10);
        // A low recommendation waits out the 60 s window (the highest recent one holds).
        let (n, _) = h.normalize(30, 10, 1, 1, 10, &up, &down);
        assert_eq!(n, 10);
        let (n, _) = h.normalize(70, 10, 1, 1, 10, &up, &down);
        assert_eq!(
            n, 10,
            "a recommendation of 20 at t=20 is still in the window"
        );
        let (n, why) = h.normalize(91, 10, 1, 1, 10, &up, &down);
        assert_eq!((n, why.reason), (1, "DesiredWithinRange"));
        // Pods policy on the way down: at most 2 pods per minute.
        let slow = Rules {
            stabilization_window_seconds: 0,
            select_policy: "Max".into(),
            policies: vec![Policy {
                type_: "Pods".into(),
                value: 2,
                period_seconds: 60,
            }],
        };
        let mut h = History::default();
        let (n, why) = h.normalize(0, 10, 1, 1, 10, &up, &slow);
        assert_eq!((n, why.reason), (8, "ScaleDownLimit"));
    }
}
