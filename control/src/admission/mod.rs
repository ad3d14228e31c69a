//! Admission beyond the built-in plugins (docs/design/admission.md): which webhooks a
//! request goes to, and one call of a webhook. The dispatch (mutating in order with
//! reinvocation, validating in parallel) and the two-phase write that runs it come next; the
//! configurations are not served until they are obeyed.

pub mod conditions;
pub mod policy;
pub mod review;
pub mod webhooks;
