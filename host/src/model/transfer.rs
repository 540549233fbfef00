//! [`transfer`]: a tensor's copy on another device, in pinned host memory when it leaves a GPU,
//! so that offloading a worker group and bringing it back copy at the bus's full speed.

use tch::{Device, Tensor};

/// `tensor` on `device`, values and dtype unchanged (`tensor` itself when it is already there).
/// A tensor leaving a CUDA device for the CPU lands in page-locked ("pinned") memory, which the
/// GPU reads and writes directly, instead of in pageable memory staged through a bounce buffer.
pub fn transfer(tensor: &Tensor, device: Device) -> Tensor {
    match (tensor.device(), device) {
        (Device::Cuda(_), Device::Cpu) => {
            let host = Tensor::empty(tensor.size(), (tensor.kind(), Device::Cpu))
                .pin_memory(tensor.device());
            tch::no_grad(|| host.shallow_clone().copy_(tensor));
            host
        }
        _ => tensor.to_device(device),
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;

    #[test]
    fn a_tensor_arrives_unchanged_and_stays_itself_when_already_there() {
        let tensor = Tensor::from_slice(&[1.5f32, -2.0, 3.25]).to_kind(Kind::BFloat16);
        let moved = transfer(&tensor, Device::Cpu);
        assert_eq!(moved.kind(), Kind::BFloat16);
        assert!(moved.equal(&tensor));
        assert_eq!(
            moved.data_ptr(),
            tensor.data_ptr(),
            "no copy on the same device"
        );
        if tch::Cuda::is_available() {
            let away = transfer(&tensor, Device::Cuda(0));
            let back = transfer(&away, Device::Cpu);
            assert!(
                back.is_pinned(Device::Cuda(0)),
                "host copies of GPU tensors are pinned"
            );
            assert!(back.equal(&tensor));
        }
    }
}
