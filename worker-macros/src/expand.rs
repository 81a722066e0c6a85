//! The expansion of `#[handler]`: a unit struct implementing `JobDefinition`, plus per-argument
//! checks spanned to the arguments.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Ident, ItemFn, LitStr, Path, Type};

use crate::args::HandlerArgs;
use crate::signature::HandlerSignature;

/// Expands `#[handler(args)] item`. On error: `item` unchanged, followed by `compile_error!`s.
pub(crate) fn handler(args: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(error) => {
            let error = syn::Error::new(error.span(), "`#[handler]` goes on an `async fn`");
            return with_errors(item, error);
        }
    };
    let checked = HandlerArgs::parse(args).and_then(|args| {
        let signature = HandlerSignature::check(&function)?;
        let item = match &args.batch {
            Some(_) => Some(signature.batch_item(&function)?),
            None => None,
        };
        Ok((args, signature, item))
    });
    match checked {
        Ok((args, signature, None)) => generate(&args, &signature, function),
        Ok((args, signature, Some(item))) => generate_batch(&args, &signature, &item, function),
        Err(error) => with_errors(item, error),
    }
}

/// The original item and the errors, so that IDEs still see the function.
fn with_errors(item: TokenStream, error: syn::Error) -> TokenStream {
    let errors = error.to_compile_error();
    quote!(#item #errors)
}

/// The code for a handler that passed the syntactic checks.
fn generate(args: &HandlerArgs, signature: &HandlerSignature, function: ItemFn) -> TokenStream {
    let krate = &args.krate;
    let Parts {
        attrs,
        vis,
        sig,
        block,
        ident,
        name,
        struct_docs,
        handle_docs,
    } = parts(args, function, "job");
    let topic = &args.topic;

    let definition = definition_impl(krate, &ident, signature);
    let enqueue = enqueue_fns(krate, &vis, signature);
    let send_handle = send_handle(krate, &ident, signature);
    let checks = checks(krate, args.state.as_ref(), signature);

    quote! {
        #struct_docs
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident;

        impl #ident {
            /// The job's name, for logs, metrics and dead-letter records.
            #vis const NAME: &'static str = #name;
            /// The topic the job reads unless configuration overrides it.
            #vis const TOPIC: &'static str = #topic;

            #handle_docs
            #(#attrs)*
            #vis #sig #block

            #send_handle

            #enqueue
        }

        #definition
        #checks
    }
}

/// The code for a batch handler (`batch(...)`): its last argument is `Vec<item>`, its output one
/// result per item.
fn generate_batch(
    args: &HandlerArgs,
    signature: &HandlerSignature,
    item: &Type,
    function: ItemFn,
) -> TokenStream {
    let krate = &args.krate;
    let private = quote!(#krate::__private);
    let Parts {
        attrs,
        vis,
        sig,
        block,
        ident,
        name,
        struct_docs,
        handle_docs,
    } = parts(args, function, "batch job");
    let topic = &args.topic;
    let batch = args.batch.as_ref().expect("a batch handler");
    let (max, linger) = (batch.max, batch.linger_ms);
    let leading = &signature.args[..signature.args.len() - 1];
    let names: Vec<Ident> = (0..leading.len())
        .map(|index| format_ident!("__arg{}", index))
        .collect();
    let future = quote_spanned! {ident.span()=>
        impl #private::Future<Output = ::std::vec::Vec<#private::Outcome>> + #private::Send + 'static + use<__S, __M>
    };
    let enqueue = enqueue_fns_for(krate, &vis, item);
    let checks = batch_checks(krate, args.state.as_ref(), signature, item);
    let named = named_job_impl(krate, &ident);
    quote! {
        #struct_docs
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident;

        impl #ident {
            /// The job's name, for logs, metrics and dead-letter records.
            #vis const NAME: &'static str = #name;
            /// The topic the job reads unless configuration overrides it.
            #vis const TOPIC: &'static str = #topic;
            /// How the job's records are batched.
            #vis const BATCH: #private::Batch =
                #private::Batch::new(#max, #private::Duration::from_millis(#linger));

            #handle_docs
            #(#attrs)*
            #vis #sig #block

            /// The batch's jobs in, one outcome per job out: the leading arguments come from the
            /// first job, the items from each job (one that does not decode gets its rejection).
            #[doc(hidden)]
            fn __handle_batch<__S, __M>(
                jobs: ::std::vec::Vec<#private::Job>,
                state: &__S,
            ) -> #future
            where
                #(#leading: #private::FromJobParts<__S>,)*
                #item: #private::FromJob<__S, __M>,
            {
                let extracted: ::core::result::Result<(#(#leading,)*), #private::Outcome> =
                    match jobs.first() {
                        ::core::option::Option::Some(__first) => (|| {
                            ::core::result::Result::Ok((#(
                                <#leading as #private::FromJobParts<__S>>::from_job_parts(__first, state)
                                    .map_err(#private::IntoOutcome::into_outcome)?,
                            )*))
                        })(),
                        ::core::option::Option::None => ::core::result::Result::Err(
                            #private::Outcome::retry("an empty batch"),
                        ),
                    };
                let (items, places) = #private::decode_batch::<__S, __M, #item>(jobs, state);
                let any = !items.is_empty();
                let call = extracted.map(|(#(#names,)*)| any.then(|| Self::handle(#(#names,)* items)));
                places.finish(call)
            }

            #enqueue
        }

        #named

        impl<__S, __M> #private::BatchJobDefinition<(__M, #(#leading,)* #item,), __S> for #ident
        where
            __S: ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static,
            __M: 'static,
            #(#leading: #private::FromJobParts<__S>,)*
            #item: #private::FromJob<__S, __M>,
        {
            fn batch(&self) -> #private::Batch {
                Self::BATCH
            }

            fn into_batch_service(
                self,
                state: __S,
            ) -> impl #private::Service<
                ::std::vec::Vec<#private::Job>,
                Response = ::std::vec::Vec<#private::Outcome>,
                Error = #private::Infallible,
                Future: ::core::marker::Send + 'static,
            > + ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static {
                #private::BatchHandlerService::new(Self::__handle_batch::<__S, __M>, state)
            }
        }

        #checks
    }
}

/// [`checks`] for a batch handler: the leading arguments, the item extractor, and an output of
/// one result per item.
fn batch_checks(
    krate: &Path,
    state: Option<&Type>,
    signature: &HandlerSignature,
    item: &Type,
) -> TokenStream {
    let private = quote!(#krate::__private);
    let state = state
        .or(signature.state.as_ref())
        .map_or_else(|| quote!(()), |state| quote!(#state));
    let leading = &signature.args[..signature.args.len() - 1];
    let leading_checks = leading
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> #private::assert_from_job_parts::<#state, #ty>();));
    let item_check = quote_spanned!(item.span()=> #private::assert_from_job::<#state, _, #item>(););
    let output_check = match &signature.output {
        Some(ty) => quote_spanned!(ty.span()=> #private::assert_batch_output::<#ty>();),
        None => quote!(#private::assert_batch_output::<()>();),
    };
    quote! {
        const _: () = {
            #[allow(dead_code)]
            fn __handler_signature_is_valid() {
                #(#leading_checks)*
                #item_check
                #output_check
            }
        };
    }
}

/// What both kinds of handler generate around the function: the unit struct's name and docs,
/// and the function renamed `handle`.
struct Parts {
    attrs: Vec<Attribute>,
    vis: syn::Visibility,
    sig: syn::Signature,
    block: Box<syn::Block>,
    ident: Ident,
    name: LitStr,
    struct_docs: TokenStream,
    handle_docs: TokenStream,
}

/// [`Parts`] of `function`; a `kind` ("job", "batch job") without docs of its own gets a line.
fn parts(args: &HandlerArgs, function: ItemFn, kind: &str) -> Parts {
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = function;
    let ident = sig.ident.clone();
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| LitStr::new(&ident_name(&ident), ident.span()));
    sig.ident = Ident::new("handle", ident.span());
    let docs: Vec<&Attribute> = attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .collect();
    let (struct_docs, handle_docs) = if docs.is_empty() {
        let doc = format!("The `{}` {kind} (`#[handler]`).", name.value());
        (
            quote!(#[doc = #doc]),
            quote!(#[doc = "The handler function as written."]),
        )
    } else {
        (quote!(#(#docs)*), TokenStream::new())
    };
    Parts {
        attrs,
        vis,
        sig,
        block,
        ident,
        name,
        struct_docs,
        handle_docs,
    }
}

/// `impl NamedJob` for the unit struct.
fn named_job_impl(krate: &Path, ident: &Ident) -> TokenStream {
    let private = quote!(#krate::__private);
    quote! {
        impl #private::NamedJob for #ident {
            fn name(&self) -> &'static str {
                Self::NAME
            }

            fn topic(&self) -> &'static str {
                Self::TOPIC
            }
        }
    }
}

/// The function's name without a raw-identifier prefix.
fn ident_name(ident: &Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map(str::to_owned).unwrap_or(name)
}

/// `handle` behind a signature the runtime can use as it is: the output is converted into an
/// `Outcome` (a return type that is no `IntoOutcome` fails here, on the return type) and the
/// future promises `Send` (one that is not fails here, on the function's name, with the
/// compiler's note on the value held across an `.await`). Nothing else fails for these reasons.
fn send_handle(krate: &Path, ident: &Ident, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let names: Vec<Ident> = (0..signature.args.len())
        .map(|index| format_ident!("__arg{}", index))
        .collect();
    let types = &signature.args;
    let into_outcome = match &signature.output {
        Some(ty) => quote_spanned!(ty.span()=> #private::IntoOutcome::into_outcome(output)),
        None => quote!(#private::IntoOutcome::into_outcome(output)),
    };
    let future = quote_spanned! {ident.span()=>
        impl #private::Future<Output = #private::Outcome> + #private::Send + 'static
    };
    quote! {
        #[doc(hidden)]
        #[allow(clippy::too_many_arguments)]
        fn __handle_send(#(#names: #types),*) -> #future {
            let future = Self::handle(#(#names),*);
            async move {
                let output = future.await;
                #into_outcome
            }
        }
    }
}

/// The typed producer side: `enqueue(&producer, &payload)` and `enqueue_with(.., options)`, whose
/// payload type is the one the job's last argument decodes (`Json<Sms>` takes `&Sms`), so a
/// payload of another type is a compile error at the call. The bound is higher-ranked, so the
/// compiler checks it where `enqueue` is called, not where it is defined: a job whose last
/// argument has no enqueueable payload (`Meta`, `Job`) still compiles. A job without arguments
/// gets none.
fn enqueue_fns(krate: &Path, vis: &syn::Visibility, signature: &HandlerSignature) -> TokenStream {
    match signature.args.last() {
        Some(last) => enqueue_fns_for(krate, vis, last),
        None => TokenStream::new(),
    }
}

/// [`enqueue_fns`] for the payload extractor `last` (a batch handler's item).
fn enqueue_fns_for(krate: &Path, vis: &syn::Visibility, last: &Type) -> TokenStream {
    let private = quote!(#krate::__private);
    quote! {
        #private::with_job_producer! {
        /// Enqueues a job for this handler on its topic ([`Self::TOPIC`]), with the payload type
        /// the handler takes; returns once the broker confirmed it.
        #vis async fn enqueue(
            producer: &#private::JobProducer,
            payload: &<#last as #private::Payload>::Value,
        ) -> #private::Result<#private::Enqueued>
        where
            for<'__a> #last: #private::Payload,
        {
            producer
                .enqueue_as::<#last>(Self::TOPIC, payload, #private::EnqueueOptions::new())
                .await
        }

        /// [`enqueue`](Self::enqueue) with a key, headers, a time to run or another topic.
        #vis async fn enqueue_with(
            producer: &#private::JobProducer,
            payload: &<#last as #private::Payload>::Value,
            options: #private::EnqueueOptions,
        ) -> #private::Result<#private::Enqueued>
        where
            for<'__a> #last: #private::Payload,
        {
            producer.enqueue_as::<#last>(Self::TOPIC, payload, options).await
        }
        }
    }
}

/// `impl NamedJob` and `impl JobDefinition` (generic over the worker's state) for the unit
/// struct.
///
/// Every bound mentions `__S`, so an argument that does not fit never fails here (the impl just
/// does not apply); the spanned [`checks`] report it instead, once.
fn definition_impl(krate: &Path, ident: &Ident, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let (marker_param, args_tuple, bounds) = match signature.args.split_last() {
        None => (TokenStream::new(), quote!(((),)), TokenStream::new()),
        Some((last, leading)) => (
            quote!(__M,),
            quote!((__M, #(#leading,)* #last,)),
            quote! {
                __M: 'static,
                #(#leading: #private::FromJobParts<__S>,)*
                #last: #private::FromJob<__S, __M>,
            },
        ),
    };
    let named = named_job_impl(krate, ident);
    quote! {
        #named

        impl<__S, #marker_param> #private::JobDefinition<#args_tuple, __S> for #ident
        where
            __S: ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static,
            #bounds
        {

            fn into_service(
                self,
                state: __S,
            ) -> impl #private::Service<
                #private::Job,
                Response = #private::Outcome,
                Error = #private::Infallible,
                Future: ::core::marker::Send + 'static,
            > + ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static {
                #private::HandlerService::new(Self::__handle_send, state)
            }
        }
    }
}

/// Compile-time checks, each spanned to its argument, so that a type error lands on the offending
/// argument rather than on the attribute. Arguments are checked against
/// the declared state (`state = T`), else `T` of the first `State<T>` argument, else `()`.
fn checks(krate: &Path, state: Option<&Type>, signature: &HandlerSignature) -> TokenStream {
    let private = quote!(#krate::__private);
    let state = state
        .or(signature.state.as_ref())
        .map_or_else(|| quote!(()), |state| quote!(#state));
    let count = signature.args.len();
    let argument_checks = signature.args.iter().enumerate().map(|(index, ty)| {
        if index + 1 == count {
            quote_spanned!(ty.span()=> #private::assert_from_job::<#state, _, #ty>();)
        } else {
            quote_spanned!(ty.span()=> #private::assert_from_job_parts::<#state, #ty>();)
        }
    });
    quote! {
        const _: () = {
            #[allow(dead_code)]
            fn __handler_signature_is_valid() {
                #(#argument_checks)*
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn expand(args: TokenStream, item: TokenStream) -> String {
        handler(args, item).to_string()
    }

    #[test]
    fn generates_a_definition_and_keeps_the_function() {
        let out = expand(
            quote!(topic = "sms", name = "send_sms"),
            quote! {
                /// Sends one SMS.
                pub async fn send_sms(meta: Meta, Json(sms): Json<Sms>) -> Result<(), JobError> {
                    Ok(())
                }
            },
        );
        assert!(out.contains("# [doc = r\" Sends one SMS.\"] # [allow (non_camel_case_types)]"));
        assert!(out.contains("pub struct send_sms ;"));
        assert!(out.contains("pub const NAME : & 'static str = \"send_sms\" ;"));
        assert!(out.contains("pub const TOPIC : & 'static str = \"sms\" ;"));
        assert!(out.contains("pub async fn handle (meta : Meta , Json (sms) : Json < Sms >)"));
        assert!(out.contains("JobDefinition < (__M , Meta , Json < Sms > ,) , __S > for send_sms"));
        assert!(out.contains("Meta : :: worker_core :: __private :: FromJobParts < __S >"));
        assert!(
            out.contains("Json < Sms > : :: worker_core :: __private :: FromJob < __S , __M >")
        );
        assert!(out.contains("assert_from_job_parts :: < () , Meta > ()"));
        assert!(out.contains("assert_from_job :: < () , _ , Json < Sms > > ()"));
        assert!(out.contains("let output = future . await ; :: worker_core :: __private :: IntoOutcome :: into_outcome (output)"));
        assert!(out.contains("fn __handle_send (__arg0 : Meta , __arg1 : Json < Sms >)"));
        assert!(out.contains(
            "Output = :: worker_core :: __private :: Outcome > + :: worker_core :: __private :: Send + 'static"
        ));
        assert!(out.contains("HandlerService :: new (Self :: __handle_send , state)"));
        assert!(out.contains(
            "payload : & < Json < Sms > as :: worker_core :: __private :: Payload > :: Value"
        ));
        assert!(
            out.contains(
                "where for < '__a > Json < Sms > : :: worker_core :: __private :: Payload"
            )
        );
        assert!(out.contains("enqueue_as :: < Json < Sms > > (Self :: TOPIC , payload"));
        assert!(!out.contains("compile_error"));
    }

    #[test]
    fn a_batch_handler_gets_a_batch_definition() {
        let out = expand(
            quote!(topic = "emails", batch(max = 100, linger = "2s")),
            quote! {
                async fn send_emails(State(p): State<P>, emails: Vec<Json<Email>>) -> Vec<Result<(), JobError>> {
                    Vec::new()
                }
            },
        );
        assert!(out.contains(
            "const BATCH : :: worker_core :: __private :: Batch = :: worker_core :: __private :: Batch :: new (100usize , :: worker_core :: __private :: Duration :: from_millis (2000u64))"
        ), "{out}");
        assert!(out.contains(
            "BatchJobDefinition < (__M , State < P > , Json < Email > ,) , __S > for send_emails"
        ));
        assert!(out.contains("decode_batch :: < __S , __M , Json < Email > > (jobs , state)"));
        assert!(out.contains("Self :: handle (__arg0 , items)"));
        assert!(out.contains("assert_batch_output :: < Vec < Result < () , JobError > > > ()"));
        assert!(out.contains("assert_from_job :: < P , _ , Json < Email > > ()"));
        assert!(out.contains("enqueue_as :: < Json < Email > > (Self :: TOPIC , payload"));
        assert!(
            !out.contains(":: JobDefinition <"),
            "no single-record definition"
        );
        assert!(!out.contains("compile_error"));

        let not_a_vec = expand(
            quote!(topic = "emails", batch(max = 10)),
            quote!(
                async fn send(email: Json<Email>) {}
            ),
        );
        assert!(not_a_vec.contains("a batch handler's last argument is a `Vec` of an extractor"));
    }

    #[test]
    fn name_defaults_to_the_function_and_state_to_the_state_argument() {
        let out = expand(
            quote!(topic = "mail", crate = "::wc"),
            quote!(
                async fn r#send(State(db): State<Db>) {}
            ),
        );
        assert!(out.contains("const NAME : & 'static str = \"send\""));
        assert!(out.contains("# [doc = \"The `send` job (`#[handler]`).\"]"));
        assert!(out.contains("# [doc = \"The handler function as written.\"]"));
        assert!(out.contains(":: wc :: __private :: assert_from_job :: < Db , _ , State < Db > >"));
        assert!(!out.contains("worker_core"));
    }

    #[test]
    fn explicit_state_wins() {
        let out = expand(
            quote!(topic = "mail", state = App),
            quote!(
                async fn send(State(db): State<Db>, meta: Meta) {}
            ),
        );
        assert!(out.contains("assert_from_job_parts :: < App , State < Db > >"));
    }

    #[test]
    fn no_arguments() {
        let out = expand(
            quote!(topic = "tick"),
            quote!(
                async fn tick() {}
            ),
        );
        assert!(out.contains(
            "impl < __S , > :: worker_core :: __private :: JobDefinition < (() ,) , __S > for tick"
        ));
        assert!(out.contains("fn __handle_send () -> impl :: worker_core :: __private :: Future"));
        assert!(!out.contains("fn enqueue"), "no payload, no typed enqueue");
    }

    #[test]
    fn errors_keep_the_function() {
        let out = expand(
            quote!(topic = "sms"),
            quote!(
                fn send(body: String) {}
            ),
        );
        assert!(out.starts_with("fn send (body : String) { }"));
        assert!(
            out.contains("compile_error ! { \"a `#[handler]` function must be an `async fn`\" }")
        );
        assert!(!out.contains("struct"));

        let out = expand(
            quote!(),
            quote!(
                async fn send() {}
            ),
        );
        assert!(out.starts_with("async fn send () { }"));
        assert!(out.contains("needs a default topic"));

        let out = expand(
            quote!(topic = "sms"),
            quote!(
                struct NotAFunction;
            ),
        );
        assert!(out.starts_with("struct NotAFunction ;"));
        assert!(out.contains("goes on an `async fn`"));
    }
}
