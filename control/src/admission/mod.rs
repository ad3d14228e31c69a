//! Admission beyond the built-in plugins (docs/design/admission.md): which webhooks a
//! request goes to (`webhooks`), one call of a webhook (`review`), the webhooks in force and
//! their dispatch (`dispatch`), webhooks' `matchConditions` (`conditions`) and
//! ValidatingAdmissionPolicy (`policy`).

pub mod conditions;
pub mod dispatch;
pub mod policy;
pub mod review;
pub mod webhooks;
