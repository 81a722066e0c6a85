//! Procedural macros for `worker-core`.

use proc_macro::TokenStream;

/// Placeholder.
#[proc_macro_attribute]
pub fn handler(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
