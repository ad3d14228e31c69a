//! A pod's lifecycle on the node: an enum of stages with guarded transitions, stepped by a
//! pure function. The worker ([`super::worker`]) performs the effects and feeds back events.
//!
//! ```text
//! Preparing --ImagesReady--> CreatingSandbox --SandboxReady--> Initializing{0} .. --> Running
//!     |  \--Adopted (containers found running after an agent restart)------------------^
//!     \--Rejected--> Rejected            Initializing --InitFailed--> Finished{false}
//! Running --AllExited{succeeded}--> Finished{succeeded}
//! any stage but Gone --DeleteRequested--> Terminating --TornDown--> Gone
//! ```

/// Where a pod is in its life on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Admission and images.
    Preparing,
    /// Images present: the sandbox (pod namespaces) is being made.
    CreatingSandbox,
    /// Running init container `index` (in order; each must exit 0).
    Initializing { index: usize },
    /// App containers started and supervised (restarted per the restart policy).
    Running,
    /// Every container has finished for good.
    Finished { succeeded: bool },
    /// Refused by admission (e.g. privileged without `--allow-privileged`).
    Rejected { message: String },
    /// Containers being stopped and everything removed.
    Terminating,
    /// Nothing left on the node; the worker ends.
    Gone,
}

/// What happened, as seen by the worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    ImagesReady,
    /// The sandbox exists; `init_containers` is how many init containers the pod has.
    SandboxReady {
        init_containers: usize,
    },
    /// The current init container exited 0.
    InitSucceeded,
    /// An init container failed and will not be retried (restartPolicy Never).
    InitFailed,
    /// After an agent restart the pod's app containers were found: take them over.
    Adopted,
    /// Every app container exited and none will be restarted.
    AllExited {
        succeeded: bool,
    },
    Rejected {
        message: String,
    },
    DeleteRequested,
    TornDown,
}

/// A transition that the lifecycle does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pod lifecycle: {event:?} is not allowed in stage {stage:?}")]
pub struct BadTransition {
    pub stage: Stage,
    pub event: Event,
}

/// The next stage after `event` in `stage`.
pub fn step(stage: &Stage, event: &Event) -> Result<Stage, BadTransition> {
    use Event as E;
    use Stage as S;
    let next = match (stage, event) {
        (S::Gone, _) => None,
        (S::Terminating, E::TornDown) => Some(S::Gone),
        (S::Terminating, _) => None,
        (_, E::DeleteRequested) => Some(S::Terminating),
        (S::Preparing, E::ImagesReady) => Some(S::CreatingSandbox),
        (S::Preparing, E::Adopted) => Some(S::Running),
        (S::Preparing, E::Rejected { message }) => Some(S::Rejected {
            message: message.clone(),
        }),
        (S::CreatingSandbox, E::SandboxReady { init_containers }) => {
            Some(if *init_containers == 0 {
                S::Running
            } else {
                S::Initializing { index: 0 }
            })
        }
        (S::CreatingSandbox, E::Rejected { message }) => Some(S::Rejected {
            message: message.clone(),
        }),
        (S::Initializing { index }, E::InitSucceeded) => Some(S::Initializing { index: index + 1 }),
        (S::Initializing { .. }, E::InitFailed) => Some(S::Finished { succeeded: false }),
        (S::Running, E::AllExited { succeeded }) => Some(S::Finished {
            succeeded: *succeeded,
        }),
        _ => None,
    };
    next.ok_or_else(|| BadTransition {
        stage: stage.clone(),
        event: event.clone(),
    })
}

/// After the last init container succeeded, `Initializing{n}` means "all done": this maps
/// it to `Running`.
pub fn settle(stage: Stage, init_containers: usize) -> Stage {
    match stage {
        Stage::Initializing { index } if index >= init_containers => Stage::Running,
        other => other,
    }
}

/// The pod phase a stage shows (Running may still be Pending until a container runs; the
/// status builder refines that).
pub fn phase(stage: &Stage) -> &'static str {
    match stage {
        Stage::Preparing | Stage::CreatingSandbox | Stage::Initializing { .. } => "Pending",
        Stage::Running | Stage::Terminating | Stage::Gone => "Running",
        Stage::Finished { succeeded: true } => "Succeeded",
        Stage::Finished { succeeded: false } | Stage::Rejected { .. } => "Failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn happy_path_with_init_containers() {
        let mut s = Stage::Preparing;
        s = step(&s, &Event::ImagesReady).unwrap();
        s = step(&s, &Event::SandboxReady { init_containers: 2 }).unwrap();
        assert_eq!(s, Stage::Initializing { index: 0 });
        s = settle(step(&s, &Event::InitSucceeded).unwrap(), 2);
        assert_eq!(s, Stage::Initializing { index: 1 });
        s = settle(step(&s, &Event::InitSucceeded).unwrap(), 2);
        assert_eq!(s, Stage::Running);
        s = step(&s, &Event::AllExited { succeeded: true }).unwrap();
        assert_eq!(phase(&s), "Succeeded");
        s = step(&s, &Event::DeleteRequested).unwrap();
        assert_eq!(s, Stage::Terminating);
        assert_eq!(step(&s, &Event::TornDown).unwrap(), Stage::Gone);
    }

    #[test]
    fn guarded_transitions() {
        assert!(step(&Stage::Preparing, &Event::InitSucceeded).is_err());
        assert!(step(&Stage::Running, &Event::ImagesReady).is_err());
        assert!(step(&Stage::Gone, &Event::DeleteRequested).is_err());
        assert!(step(&Stage::Terminating, &Event::DeleteRequested).is_err());
        assert!(step(&Stage::Finished { succeeded: true }, &Event::Adopted).is_err());
        assert_eq!(
            step(
                &Stage::CreatingSandbox,
                &Event::SandboxReady { init_containers: 0 }
            )
            .unwrap(),
            Stage::Running
        );
        assert_eq!(
            step(&Stage::Initializing { index: 0 }, &Event::InitFailed).unwrap(),
            Stage::Finished { succeeded: false }
        );
        let r = step(
            &Stage::Preparing,
            &Event::Rejected {
                message: "no".into(),
            },
        )
        .unwrap();
        assert_eq!(phase(&r), "Failed");
        assert_eq!(
            step(&Stage::Preparing, &Event::Adopted).unwrap(),
            Stage::Running
        );
    }
}
