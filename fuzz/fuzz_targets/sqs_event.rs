#![no_main]
libfuzzer_sys::fuzz_target!(|bytes: &[u8]| redrive::oracles::sqs_event(bytes));
