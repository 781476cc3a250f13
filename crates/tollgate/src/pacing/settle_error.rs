//! Why a settlement or a cancellation did not happen.

use crate::{CheckError, StoreError};

/// [`crate::Limiter::adjust`]'s failure. Unlike a check, a settlement has no answer a policy
/// could give in the store's place (the units would just be lost), so a store failure is an
/// error the caller sees, also counted (`tollgate_store_errors_total`) and logged.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// The call was invalid: unknown limit, missing key part, a delta beyond the limit's
    /// capacity.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The store failed: the settlement is not confirmed. When the call reached the store
    /// and only its answer was lost (a timeout, a dropped connection), it may have been
    /// applied, and a retry would apply it again; when the store was never reached (circuit
    /// open, refused connection), it was not.
    #[error("the store failed")]
    Store(#[from] StoreError),
}
