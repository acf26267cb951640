#pragma once
// Stands in for the real engine header in the layer check's test tree.
