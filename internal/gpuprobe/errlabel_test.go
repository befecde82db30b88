package gpuprobe

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestDeadline(t *testing.T) {
	tests := []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{GPUTimeBudget: 250 * time.Millisecond}, 31 * time.Second}, // the exporter's default
		{Config{GPUTimeBudget: 10 * time.Second}, 70 * time.Second},       // the exporter's largest
		{Config{GPUTimeBudget: 2 * time.Second, Fill: true}, 8*time.Second + 30*time.Second + 2*time.Minute},
		{Config{}, 30 * time.Second},
	}
	for _, tc := range tests {
		if got := Deadline(tc.cfg); got != tc.want {
			t.Errorf("Deadline(budget %s, fill %v) = %s, want %s", tc.cfg.GPUTimeBudget, tc.cfg.Fill, got, tc.want)
		}
	}
}

func TestErrorLabel(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"deadline", context.DeadlineExceeded, "deadline_exceeded"},
		{"wrapped deadline", fmt.Errorf("gpuprobe: probe of device 0 abandoned: %w", context.DeadlineExceeded), "deadline_exceeded"},
		{"busy", ErrBusy, "busy"},
		{"wrapped busy", fmt.Errorf("device 1: %w", ErrBusy), "busy"},
		{"panic", fmt.Errorf("%w: boom", ErrPanic), "panic"},
		{"no device", ErrNoDevice, "no_device"},
		{"canceled", context.Canceled, "canceled"},
		{"CUDA out of memory", &CUDAError{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}, "out_of_memory"},
		{"CUDA in the table, name ignored", fmt.Errorf("gpuprobe: %w", &CUDAError{Code: 46, Name: "CUDA_ERROR_DEVICE_UNAVAILABLE"}), "devices_unavailable"},
		{"CUDA code off the table, by name", &CUDAError{Code: 720, Name: "CUDA_ERROR_LAUNCH_FAILED_X"}, "launch_failed_x"},
		{"CUDA code off the table, no name", &CUDAError{Code: 12345, Name: "CUresult 12345"}, "cuda_error_12345"},
		{"other", errors.New("something else"), "other"},
	}
	for _, tc := range tests {
		if got := ErrorLabel(tc.err); got != tc.want {
			t.Errorf("%s: ErrorLabel(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestMeasurementErrorLabel(t *testing.T) {
	tests := []struct {
		me   MeasurementError
		want string
	}{
		{MeasurementError{Measurement: "h2d", Err: "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)", Code: 2}, "out_of_memory"},
		{MeasurementError{Measurement: "fp32", Err: "launch", Code: 702}, "launch_timeout"},
		{MeasurementError{Measurement: "fp32", Err: "x", Code: 4242}, "cuda_error_4242"},
		{MeasurementError{Measurement: "stolen", Err: "waiting: context deadline exceeded"}, "deadline_exceeded"},
		{MeasurementError{Measurement: "stolen", Err: "context canceled"}, "canceled"},
		{MeasurementError{Measurement: "launch", Err: "the timer went backwards"}, "other"},
	}
	for _, tc := range tests {
		if got := MeasurementErrorLabel(tc.me); got != tc.want {
			t.Errorf("MeasurementErrorLabel(%+v) = %q, want %q", tc.me, got, tc.want)
		}
	}
}
