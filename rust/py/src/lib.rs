//! PyO3 binding of `promptweave-core`: registration only; the wrappers live in the modules.

mod chat;
mod convert;
mod dataset;
mod errors;
mod flows;
mod format;
mod joined;
mod markers;
mod meta;
mod template;

#[pyo3::pymodule]
mod _core {
    #[pymodule_export]
    use crate::chat::PyChatTemplate;
    #[pymodule_export]
    use crate::dataset::render_dataset;
    #[pymodule_export]
    use crate::errors::{FallbackRequired, MarkerError, set_force_python};
    #[pymodule_export]
    use crate::flows::{promote_young, render_mm_rows, render_raw_rows};
    #[pymodule_export]
    use crate::format::{
        concat_prompts, format_prompt_list, join_plain, safe_format, single_pass_format,
    };
    #[pymodule_export]
    use crate::markers::parse_content;
    #[pymodule_export]
    use crate::meta::{PyMetaTemplate, PyParseMethod};
    #[pymodule_export]
    use crate::template::{PyCompiledTemplate, PyTemplateMethods};

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        // PEP 440 form of the crate version (`0.1.0-alpha.1` -> `0.1.0a1`)
        let version = env!("CARGO_PKG_VERSION")
            .replace("-alpha.", "a")
            .replace("-beta.", "b");
        m.add("__version__", version)
    }
}
