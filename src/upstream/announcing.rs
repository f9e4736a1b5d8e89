//! A transport that counts each notification for the call it belongs to as it is read
//! ([`RelayRegistry::announce_in`]), around a transport that does not do it itself (rmcp's
//! Streamable HTTP client). rmcp hands each notification to a task of its own, so one read
//! just before a call's answer can be handled just after it; counted from the read, the
//! answer waits for it ([`super::relay::CallGuard::drain`]): order is kept by reading, never
//! by waiting a while.

use std::{future::Future, sync::Arc};

use rmcp::{
    RoleClient,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};

use super::relay::RelayRegistry;

/// `inner`, announcing what it reads to `relays`.
pub(super) struct Announcing<T> {
    inner: T,
    relays: Arc<RelayRegistry>,
}

impl<T> Announcing<T> {
    pub(super) fn new(inner: T, relays: Arc<RelayRegistry>) -> Announcing<T> {
        Announcing { inner, relays }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Announcing<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let relays = &self.relays;
        let next = self.inner.receive();
        async move {
            let mut message = next.await?;
            relays.announce_in(&mut message);
            Some(message)
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
