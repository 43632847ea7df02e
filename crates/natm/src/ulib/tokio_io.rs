//! `tokio::io::AsyncRead`/`AsyncWrite` for [`Connection`] (feature `tokio`): the
//! engine's poll calls with the task's waker.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Connection;

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.into_ref().get_ref();
        match this
            .conn
            .poll_read_bytes(&this.eng, buf.initialize_unfilled(), cx.waker())
        {
            Some(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Some(Err(e)) => Poll::Ready(Err(e.into())),
            None => Poll::Pending,
        }
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.into_ref().get_ref();
        match this.conn.write_some(&this.eng, buf, false, cx.waker()) {
            Ok(n) if n > 0 || buf.is_empty() => Poll::Ready(Ok(n)),
            Ok(_) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.into_ref().get_ref().close();
        Poll::Ready(Ok(()))
    }
}
