//! Copying Hugging Face–named checkpoint tensors into a [`VarStore`] by name, shape-checked.

use std::collections::{BTreeSet, HashMap};

use tch::nn::VarStore;
use tch::Tensor;

use super::error::ModelError;
use super::gguf::model::HfTensor;

/// The variables of a [`VarStore`] being filled from a checkpoint, one named tensor at a time,
/// with the names that have received nothing yet.
pub struct WeightSink {
    variables: HashMap<String, Tensor>,
    missing: BTreeSet<String>,
}

impl WeightSink {
    /// Starts filling `vs`: every variable is missing.
    pub fn new(vs: &VarStore) -> Self {
        let variables = vs.variables();
        let missing = variables.keys().cloned().collect();
        Self { variables, missing }
    }

    /// Checks that `name` is a variable of shape `shape`, naming the tensor (and both shapes)
    /// when it is not.
    pub fn check(&self, name: &str, shape: &[usize]) -> Result<(), ModelError> {
        let Some(variable) = self.variables.get(name) else {
            return Err(ModelError::UnexpectedTensor(name.to_owned()));
        };
        let expected = variable.size();
        if expected.len() != shape.len()
            || expected.iter().zip(shape).any(|(&e, &f)| e as usize != f)
        {
            return Err(ModelError::Shape {
                tensor: name.to_owned(),
                expected,
                found: shape.to_vec(),
            });
        }
        Ok(())
    }

    /// Copies `values` into the variable `name` (after [`WeightSink::check`]), converting
    /// them to the variable's dtype and device. Values that are not all finite are refused,
    /// naming the tensor: a NaN or ∞ weight would make every output and gradient NaN.
    pub fn copy(&mut self, name: &str, values: &Tensor) -> Result<(), ModelError> {
        let shape: Vec<usize> = values.size().iter().map(|&d| d as usize).collect();
        self.check(name, &shape)?;
        check_finite(name, values)?;
        if let Some(variable) = self.variables.get(name) {
            tch::no_grad(|| variable.shallow_clone().f_copy_(values))?;
        }
        self.missing.remove(name);
        Ok(())
    }

    /// Ends the filling: fails naming a variable that received no tensor.
    pub fn finish(self) -> Result<(), ModelError> {
        match self.missing.into_iter().next() {
            Some(name) => Err(ModelError::MissingTensor(name)),
            None => Ok(()),
        }
    }
}

/// Fails when `values` holds a NaN or ∞, naming the tensor and how many. One pass: the sum in
/// f64 of finite f32/f16/bf16 values cannot overflow, so it is finite exactly when every value is.
fn check_finite(name: &str, values: &Tensor) -> Result<(), ModelError> {
    if values
        .f_sum(tch::Kind::Double)?
        .f_double_value(&[])?
        .is_finite()
    {
        return Ok(());
    }
    let bad = values
        .f_isfinite()?
        .f_logical_not()?
        .f_sum(tch::Kind::Int64)?;
    Err(ModelError::NonFinite {
        tensor: name.to_owned(),
        count: bad.f_int64_value(&[])?,
    })
}

/// Copies every tensor of `tensors` into the variable of `vs` of the same name.
///
/// Fails, naming the tensor, when a tensor has no variable, its shape differs from the
/// variable's (expected and found shapes given), its data does not fill its shape, or — once
/// all are copied — a variable received no tensor.
pub fn load_into<E>(
    vs: &VarStore,
    tensors: impl IntoIterator<Item = Result<HfTensor, E>>,
) -> Result<(), ModelError>
where
    ModelError: From<E>,
{
    let mut sink = WeightSink::new(vs);
    for tensor in tensors {
        let tensor = tensor?;
        sink.check(&tensor.name, &tensor.shape)?;
        let count: usize = tensor.shape.iter().product();
        if tensor.data.len() != count {
            return Err(ModelError::DataLength {
                tensor: tensor.name,
                shape: tensor.shape,
                expected: count,
                found: tensor.data.len(),
            });
        }
        let shape: Vec<i64> = tensor.shape.iter().map(|&d| d as i64).collect();
        let values = Tensor::from_slice(&tensor.data).view(shape.as_slice());
        sink.copy(&tensor.name, &values)?;
    }
    sink.finish()
}
