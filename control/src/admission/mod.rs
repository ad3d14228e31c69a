//! Admission beyond the built-in plugins (docs/design/admission.md): which webhooks a
//! request goes to. The calls and the two-phase write that runs them come next; the
//! configurations are not served until they are obeyed.

pub mod webhooks;
