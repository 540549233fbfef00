//! What libtorch does not expose: whether its CUDA library is part of this process, and device
//! names from the CUDA driver API (`cuDeviceGetName` of the `libcuda.so.1` that libtorch's CUDA
//! runtime has already loaded).

use std::ffi::{c_char, c_int, c_void, CStr};

/// `CUresult cuInit(unsigned int flags)`.
type CuInit = unsafe extern "C" fn(u32) -> c_int;
/// `CUresult cuDeviceGet(CUdevice *device, int ordinal)`.
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
/// `CUresult cuDeviceGetName(char *name, int len, CUdevice device)`.
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;

/// Whether `libtorch_cuda.so` is loaded: this build links libtorch's CUDA backend. (libtorch's
/// own `hasCUDA` is false on a machine without a driver even then.)
pub fn libtorch_cuda_loaded() -> bool {
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already in the process; the handle
    // is released at once.
    unsafe {
        let library = libc::dlopen(
            c"libtorch_cuda.so".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        if library.is_null() {
            return false;
        }
        libc::dlclose(library);
    }
    true
}

/// The name of CUDA device `index`, or `None` when the driver is not loaded or does not answer.
/// Call after libtorch found CUDA available (which loads the driver).
pub fn device_name(index: usize) -> Option<String> {
    let ordinal = c_int::try_from(index).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already in the process (never
    // runs a library's initialisers), and the handle is released below.
    let driver =
        unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if driver.is_null() {
        return None;
    }
    let name = name_from(driver, ordinal);
    // SAFETY: `driver` came from the successful dlopen above; closing drops only our reference.
    unsafe { libc::dlclose(driver) };
    name
}

fn name_from(driver: *mut c_void, ordinal: c_int) -> Option<String> {
    // SAFETY: each symbol is looked up by its documented driver-API name and called through
    // the signature of the CUDA driver API (cuda.h), which these entry points have kept since
    // CUDA 2; the name buffer's length is passed along, and the driver NUL-terminates it.
    unsafe {
        let init: CuInit = std::mem::transmute(symbol(driver, c"cuInit")?);
        let get: CuDeviceGet = std::mem::transmute(symbol(driver, c"cuDeviceGet")?);
        let get_name: CuDeviceGetName = std::mem::transmute(symbol(driver, c"cuDeviceGetName")?);
        if init(0) != 0 {
            return None;
        }
        let mut device: c_int = 0;
        if get(&mut device, ordinal) != 0 {
            return None;
        }
        let mut buffer = [0 as c_char; 256];
        if get_name(buffer.as_mut_ptr(), buffer.len() as c_int, device) != 0 {
            return None;
        }
        Some(
            CStr::from_ptr(buffer.as_ptr())
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The address of `name` in `library`, or `None` when it has no such symbol.
///
/// # Safety
/// `library` must be a live handle from `dlopen`.
unsafe fn symbol(library: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: the caller guarantees the handle; `name` is NUL-terminated.
    let address = unsafe { libc::dlsym(library, name.as_ptr()) };
    (!address.is_null()).then_some(address)
}
