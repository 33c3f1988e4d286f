"""The Flower ClientApp: a device that trains locally with FedAvg DeviceUpdate."""
