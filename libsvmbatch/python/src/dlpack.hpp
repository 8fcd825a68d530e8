// SPDX-License-Identifier: MIT
// The DLPack exchange structures (the legacy, unversioned ABI that every
// framework reads: torch 1.13 and 2.x, numpy >= 1.22, cupy), declared from
// the DLPack specification so that the package is built against no
// framework.  A capsule named "dltensor" holds a DLManagedTensor; the
// consumer renames it "used_dltensor" and calls deleter when done.
#pragma once

#include <cstdint>

namespace svmbatch::python {

enum DLDeviceType : std::int32_t {
	kDLCPU = 1,
	kDLCUDA = 2,
	kDLCUDAHost = 3,
};

enum DLDataTypeCode : std::uint8_t {
	kDLInt = 0,
	kDLUInt = 1,
	kDLFloat = 2,
	kDLBfloat = 4,
};

struct DLDevice {
	std::int32_t device_type;
	std::int32_t device_id;
};

struct DLDataType {
	std::uint8_t code;
	std::uint8_t bits;
	std::uint16_t lanes;
};

struct DLTensor {
	void *data;
	DLDevice device;
	std::int32_t ndim;
	DLDataType dtype;
	std::int64_t *shape;
	std::int64_t *strides; ///< null: compact row-major
	std::uint64_t byte_offset;
};

struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(DLManagedTensor *self);
};

} // namespace svmbatch::python
