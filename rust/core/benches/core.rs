//! Criterion micro-benchmarks of the core hot loops.
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use promptweave_core::{Entries, safe_format};

fn bench_safe_format(c: &mut Criterion) {
    let template = "{input}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer: {target}";
    let mut row = Entries::default();
    for (k, v) in [
        ("input", "What is 1+1?"),
        ("A", "1"),
        ("B", "2"),
        ("C", "3"),
        ("D", "4"),
        ("target", ""),
    ] {
        row.push(k, v);
    }
    c.bench_function("safe_format_mmlu_row", |b| {
        b.iter(|| safe_format(black_box(template), &row));
    });
}

criterion_group!(benches, bench_safe_format);
criterion_main!(benches);
