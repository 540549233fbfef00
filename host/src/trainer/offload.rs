//! [`Offload`]: a worker group's `offload = true`. After its update the group's weights (and
//! gradients, where some are held), reference model, critic and optimizer state (moments, f32
//! masters) leave its device for host memory (pinned when the device is a GPU); the weights
//! come back before the next rollout or evaluation that generates in process (a group on
//! inference servers keeps them off the device until its update), the rest only before the group's next update (with a
//! critic: before the critic values the iteration's calls), so other groups sharing the device
//! have its memory for their own update. A group no agent trains never updates: its weights
//! leave when the others update.
//!
//! On a CPU group the moves change nothing (host memory is where it lives); the bookkeeping
//! runs all the same.

use std::time::Instant;

use tch::Device;

use super::WorkerGroup;

/// Where an offloaded group's parts are, and what moving them cost since it was last asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Offload {
    /// The group's own device.
    home: Device,
    /// Whether the model's weights (and gradients) are on `home`.
    weights_home: bool,
    /// Whether the reference model and the optimizer state are on `home`.
    training_state_home: bool,
    /// Seconds spent moving, both directions, since [`WorkerGroup::take_offload_seconds`].
    seconds: f64,
}

/// Where an offloaded group's parts are meant to be now: on its own device ("home") or in host
/// memory. On a CPU group both are host memory; this still tells the phases apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// Whether the weights (and gradients, where some are held) are on the group's device.
    pub weights_home: bool,
    /// Whether the reference model, critic and optimizer state are on the group's device.
    pub training_state_home: bool,
}

impl Offload {
    /// A group on `home`, everything there.
    pub fn new(home: Device) -> Self {
        Self {
            home,
            weights_home: true,
            training_state_home: true,
            seconds: 0.0,
        }
    }

    fn place(&self, home: bool) -> Device {
        if home {
            self.home
        } else {
            Device::Cpu
        }
    }
}

impl WorkerGroup {
    /// With offload: brings the weights back for a rollout or evaluation.
    pub fn prepare_rollout(&mut self) {
        self.move_parts(Some(true), None);
    }

    /// With offload: brings everything back for the group's update.
    pub fn prepare_update(&mut self) {
        self.move_parts(Some(true), Some(true));
    }

    /// With offload: sends everything to host memory after the group's update.
    pub fn offload_after_update(&mut self) {
        self.move_parts(Some(false), Some(false));
    }

    /// With offload: the seconds the moves took since the last call (both directions).
    pub fn take_offload_seconds(&mut self) -> Option<f64> {
        self.offload
            .as_mut()
            .map(|offload| std::mem::take(&mut offload.seconds))
    }

    /// With offload: where the weights and the training state are meant to be now.
    pub fn residency(&self) -> Option<Residency> {
        self.offload.as_ref().map(|offload| Residency {
            weights_home: offload.weights_home,
            training_state_home: offload.training_state_home,
        })
    }

    /// Moves the weights to home (`Some(true)`) or host memory (`Some(false)`), likewise the
    /// training state; `None` leaves a part where it is. Nothing happens without offload.
    fn move_parts(&mut self, weights_home: Option<bool>, training_state_home: Option<bool>) {
        let Some(offload) = self.offload.clone() else {
            return;
        };
        let started = Instant::now();
        let mut moved = offload;
        if let Some(home) = weights_home.filter(|&h| h != moved.weights_home) {
            self.pretrained.model.to_device(moved.place(home));
            moved.weights_home = home;
        }
        if let Some(home) = training_state_home.filter(|&h| h != moved.training_state_home) {
            let device = moved.place(home);
            if let Some(reference) = &mut self.reference {
                reference.model.to_device(device);
            }
            if let Some(critic) = &mut self.critic {
                critic.to_device(device);
            }
            self.optimizer.to_device(device);
            moved.training_state_home = home;
        }
        if let Device::Cuda(index) = moved.home {
            // The copies out of the GPU may still be running: their time is the move's.
            tch::Cuda::synchronize(index as i64);
        }
        moved.seconds += started.elapsed().as_secs_f64();
        self.offload = Some(moved);
    }
}
